"""PostgreSQL's spelling of our statements (no server needed): each rewrite the dialect
makes, text in quotes left alone, and every statement form the statement classes use."""

from __future__ import annotations

import pytest

from agentkeep.persistence.postgres.connection import parse_url
from agentkeep.persistence.postgres.dialect import POSTGRES, named_parameters


@pytest.mark.parametrize(
    ("sqlite", "postgres"),
    [
        ("SELECT a FROM t WHERE id = ? AND n > ?", "SELECT a FROM t WHERE id = %s AND n > %s"),
        ("SELECT ?1, ?2 WHERE ?1 IS NULL", "SELECT %(p1)s, %(p2)s WHERE %(p1)s IS NULL"),
        (
            "INSERT OR IGNORE INTO kv (key, value_json) VALUES (?, ?)",
            "INSERT INTO kv (key, value_json) VALUES (%s, %s) ON CONFLICT DO NOTHING",
        ),
        (
            "INSERT OR IGNORE INTO x (a) SELECT ?1 WHERE EXISTS (SELECT 1) RETURNING a",
            "INSERT INTO x (a) SELECT %(p1)s WHERE EXISTS (SELECT 1) ON CONFLICT DO NOTHING "
            "RETURNING a",
        ),
        (
            "SELECT json_extract(r.definition_json, '$.driver.id') FROM r",
            "SELECT (r.definition_json::jsonb #>> '{driver,id}') FROM r",
        ),
        (
            "UPDATE o SET j = ? WHERE j IS NOT excluded.j",
            "UPDATE o SET j = %s WHERE j IS DISTINCT FROM excluded.j",
        ),
        ("SELECT 1 FROM t WHERE a IS NOT NULL", "SELECT 1 FROM t WHERE a IS NOT NULL"),
        ("SELECT a FROM t ORDER BY a LIMIT ?", "SELECT a FROM t ORDER BY a LIMIT NULLIF(%s, -1)"),
        ("SELECT a FROM t LIMIT ?3", "SELECT a FROM t LIMIT NULLIF(%(p3)s, -1)"),
        (
            "SELECT 'a?b', \"c?\" FROM t WHERE x LIKE '5%'",
            "SELECT 'a?b', \"c?\" FROM t WHERE x LIKE '5%%'",
        ),
        ("SELECT a % 2 FROM t WHERE b = ?", "SELECT a %% 2 FROM t WHERE b = %s"),
        ("BEGIN IMMEDIATE", "BEGIN; SELECT pg_current_xact_id()::text"),
        ("BEGIN", "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"),
        ("SAVEPOINT agentkeep_work_item", "SAVEPOINT agentkeep_work_item"),
    ],
)
def test_each_sqlite_form_is_rewritten_once_and_nothing_else(sqlite: str, postgres: str) -> None:
    assert POSTGRES.prepare(sqlite) == postgres


def test_named_parameters_are_bound_by_name() -> None:
    assert named_parameters(POSTGRES.prepare("SELECT ?1, ?1"))
    assert not named_parameters(POSTGRES.prepare("SELECT ?, ?"))


def test_the_url_names_the_schema_and_libpq_never_sees_it() -> None:
    target = parse_url("postgresql://u:secret@h:5/db?sslmode=disable&schema=store_2")
    assert target.schema == "store_2"
    assert target.conninfo == "postgresql://u:secret@h:5/db?sslmode=disable"
    assert "secret" not in target.display
    assert parse_url("postgresql://h/db").schema == "agentkeep"


@pytest.mark.parametrize("schema", ["Upper", "1abc", "a-b", "x" * 64, ""])
def test_a_schema_that_is_not_a_plain_identifier_is_refused(schema: str) -> None:
    from agentkeep.errors import InvalidConfigError

    with pytest.raises(InvalidConfigError, match="schema"):
        parse_url(f"postgresql://h/db?schema={schema}")
