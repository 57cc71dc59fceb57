"""The writer's suites on PostgreSQL: group commit, a lone item, a failing writer left
``down`` until its supervisor starts the next incarnation (which takes the store's lock again
on a new session), every ``Store.open`` of them opening a PostgreSQL schema instead."""

from __future__ import annotations

import pytest
from tests.unit.persistence.postgres.reuse import reused

pytestmark = pytest.mark.usefixtures("stores_on_postgres")

globals().update(reused("persistence/test_writer_restart.py", own_store=True))
globals().update(
    reused(
        "persistence/test_writer.py",
        own_store=True,
        # SQLite's own: WAL checkpoints.
        skip=("test_idle_writer_checkpoints_the_wal",),
    )
)
