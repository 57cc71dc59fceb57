"""The writer's memo on PostgreSQL: the SQLite memo suite (what the memo answers is what the
database holds, through rolled-back items and groups, raw SQL, a durable step's statements),
on this directory's store and with every store it opens itself a PostgreSQL schema."""

from __future__ import annotations

import pytest
from tests.unit.persistence.postgres.reuse import reused

pytestmark = pytest.mark.usefixtures("stores_on_postgres")

globals().update(
    reused(
        "persistence/test_memo.py",
        skip=(
            # SQLite's own schema text: its triggers are checked where they are written.
            "test_no_trigger_writes_a_table",
            # A fault-injecting SQLite VFS.
            "test_a_commit_that_fails_leaves_nothing_remembered",
            # A store per operation index: each opening runs every migration's DDL, which
            # takes minutes on a server (near the per-test timeout); the writer suites
            # cover faults at COMMIT and after it here.
            "test_a_fault_at_any_store_operation_leaves_the_memo_true",
        ),
    )
)
