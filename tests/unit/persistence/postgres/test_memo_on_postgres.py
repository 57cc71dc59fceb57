"""The writer's memo on PostgreSQL: the SQLite suite's tests that run on the ``store``
fixture, again on a PostgreSQL store (what the memo answers is what the database holds)."""

from __future__ import annotations

from tests.unit.persistence.postgres.reuse import reused

globals().update(reused("persistence/test_memo.py"))
