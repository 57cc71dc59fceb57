"""Turns on PostgreSQL: the SQLite turn suites (native turns, a steer joining a turn and
its cancellation, owed work) with every system's store on PostgreSQL."""

from __future__ import annotations

import pytest
from tests.unit.persistence.postgres.reuse import fixtures_of, reused

pytestmark = pytest.mark.usefixtures("systems_on_postgres")

globals().update(fixtures_of("turns/conftest.py"))  # its world opens systems: on PostgreSQL
_SQLITE_ONLY = (
    # Writes an older row shape into the SQLite file directly (marked sqlite_only).
    "test_a_key_accepted_before_seed_002s_message_shape_still_returns_its_turn",
)
for _suite in ("test_native_turns", "test_cancel_joined", "test_owed_work"):
    globals().update(reused(f"turns/{_suite}.py", skip=_SQLITE_ONLY))
