"""Every statement class's behaviour on PostgreSQL: the SQLite suite of
``tests/unit/persistence/test_transaction.py``, run again on a PostgreSQL store (its
foreign-key test accepts either driver's refusal)."""

from __future__ import annotations

from tests.unit.persistence.postgres.reuse import sqlite_tests

globals().update(sqlite_tests("test_transaction"))
