"""More of the SQLite persistence suites, run again on PostgreSQL through this directory's
``store`` fixture: the key-value store's conditional writes and prefix ranges, archived
history, and the memo's answers against what the database holds."""

from __future__ import annotations

from tests.unit.persistence.postgres.reuse import sqlite_tests

globals().update(sqlite_tests("test_kv"))
globals().update(sqlite_tests("test_archive"))
globals().update(sqlite_tests("test_memo_queue_order"))
globals().update(sqlite_tests("test_memo_started_turns"))
globals().update(sqlite_tests("test_composition"))
