"""The registry's suites (versioned definitions, the tables' statements and triggers) run
again with every system's store on PostgreSQL."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from tests.unit.persistence.postgres.reuse import fixtures_of, reused

pytestmark = pytest.mark.usefixtures("systems_on_postgres")

globals().update(fixtures_of("registry/conftest.py"))
globals().update(reused("registry/test_service.py"))
globals().update(
    reused("registry/test_registry_store.py", skip=("test_the_tables_refuse_to_rewrite_history",))
)


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        ("UPDATE definition_revisions SET hash = 'forged'", "immutable"),
        ("DELETE FROM definition_revisions", "never deleted"),
        ("DELETE FROM definitions", "never deleted"),
        ("UPDATE definitions SET current_revision = 7", "its own revisions"),
    ],
)
def test_the_tables_refuse_to_rewrite_history_on_postgres(
    open_system: Any, statement: str, message: str
) -> None:
    system = open_system()
    system.registry.create({"id": "kept"})
    before = system.registry.get("kept")
    with pytest.raises(psycopg.errors.IntegrityConstraintViolation, match=message):
        system.internals.store.transact(lambda tx: tx.sql.execute(statement))
    assert system.registry.get("kept") == before
