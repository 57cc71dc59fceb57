"""Every statement class's behaviour on PostgreSQL: the SQLite suite of
``tests/unit/persistence/test_transaction.py``, run again on a PostgreSQL store (the one test
that names SQLite's exception class has its twin here)."""

from __future__ import annotations

import psycopg
import pytest
from tests.unit.persistence.postgres.reuse import sqlite_tests

from agentkeep.persistence import Store
from agentkeep.types import TextBlock, UserMessage
from agentkeep.types.records import UserRecord

globals().update(
    sqlite_tests("test_transaction", skip=("test_foreign_keys_refuse_rows_for_unknown_agents",))
)


def test_foreign_keys_refuse_rows_for_unknown_agents_on_postgres(store: Store) -> None:
    record = UserRecord(message_id="x", message=UserMessage(content=(TextBlock(text="x"),)))
    with pytest.raises(psycopg.errors.ForeignKeyViolation):
        store.transact(lambda tx: tx.records.append("ghost", record))
