"""PostgreSQL's spelling of our statements: :class:`PostgresDialect`.

Every statement class writes its SQL once in SQLite's spelling
(:mod:`agentkeep.persistence.dialect` lists what that spelling uses); this dialect rewrites
those few forms, and nothing else:

- ``?`` becomes ``%s`` and ``?N`` becomes ``%(pN)s`` (psycopg binds a repeated name once, so
  ``?1 IS NULL OR x = ?1`` keeps meaning one value); a literal ``%`` is doubled;
- ``INSERT OR IGNORE …`` becomes ``INSERT … ON CONFLICT DO NOTHING`` (before any
  ``RETURNING``);
- ``json_extract(column, '$.a.b')`` becomes ``(column::jsonb #>> '{a,b}')`` (text: every
  path our statements extract is a string);
- ``IS NOT x`` (SQLite's null-safe inequality) becomes ``IS DISTINCT FROM x``; ``IS NOT
  NULL`` is left alone;
- ``LIMIT ?`` becomes ``LIMIT NULLIF(%s, -1)``: SQLite's ``-1`` (no limit) is PostgreSQL's
  ``NULL``;
- ``BEGIN IMMEDIATE`` (the writer's group) becomes :data:`WRITER_BEGIN`, ``BEGIN`` and the
  transaction's id in one round trip (the store's advisory lock already makes this
  connection the only writer; the id is what resolves a COMMIT whose outcome was lost); a
  bare ``BEGIN`` (a reader's snapshot) becomes one ``REPEATABLE READ READ ONLY`` snapshot, as
  a SQLite WAL read transaction is.

``rowid`` needs no rewriting: the one table a statement orders by it (``turn_inputs``) has a
``rowid`` identity column in PostgreSQL's schema (:mod:`agentkeep.persistence.postgres.schema`).
Text inside quotes is never rewritten (but its ``%`` is doubled too: psycopg looks for
placeholders everywhere). :meth:`PostgresDialect.prepare` is pure and caches.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

__all__ = ["POSTGRES", "WRITER_BEGIN", "XACT_ID", "PostgresDialect", "named_parameters"]

#: The id of the open transaction (assigned now: the COMMIT's outcome, if lost, is looked up
#: by it).
XACT_ID: Final = "SELECT pg_current_xact_id()::text"
#: The writer's ``BEGIN`` and :data:`XACT_ID`: outside a batch the connection sends both in
#: one round trip by the simple protocol and reads the second one's row; in a batch it sends
#: the BEGIN and asks for the id (:meth:`~.batch.Batch.ask`), without waiting.
WRITER_BEGIN: Final = "BEGIN; " + XACT_ID

# A quoted literal or identifier (kept as is), or one of the forms we rewrite.
_TOKEN = re.compile(
    r"""(?P<quoted>'(?:[^']|'')*'|"(?:[^"]|"")*")"""
    r"""|(?P<json>json_extract\(\s*(?P<column>[\w.]+)\s*,\s*'\$\.(?P<path>[\w.]+)'\s*\))"""
    r"""|(?P<isnot>\bIS\s+NOT\s+(?!NULL\b))"""
    r"""|(?P<limit>\bLIMIT\s+\?(?P<limitn>\d*))"""
    r"""|(?P<param>\?(?P<n>\d*))"""
    r"""|(?P<percent>%)""",
    re.IGNORECASE,
)
_OR_IGNORE = re.compile(r"^\s*INSERT\s+OR\s+IGNORE\s+", re.IGNORECASE)
_RETURNING = re.compile(r"\sRETURNING\s", re.IGNORECASE)
_NAMED = re.compile(r"%\(p(\d+)\)s")


def _placeholder(number: str) -> str:
    return f"%(p{number})s" if number else "%s"


def _rewrite(match: re.Match[str]) -> str:
    if match.group("quoted") is not None:
        # psycopg reads placeholders everywhere, quotes included: only ``%`` needs escaping.
        return match.group(0).replace("%", "%%")
    if match.group("json") is not None:
        path = ",".join(match.group("path").split("."))
        return f"({match.group('column')}::jsonb #>> '{{{path}}}')"
    if match.group("isnot") is not None:
        return "IS DISTINCT FROM "
    if match.group("limit") is not None:
        return f"LIMIT NULLIF({_placeholder(match.group('limitn'))}, -1)"
    if match.group("param") is not None:
        return _placeholder(match.group("n"))
    return "%%"


class PostgresDialect:
    """PostgreSQL: our statements rewritten as the module says."""

    name: Final = "postgresql"
    translates: Final = True

    def prepare(self, sql: str) -> str:
        return _prepare(sql)


@lru_cache(maxsize=4096)
def _prepare(sql: str) -> str:
    stripped = sql.strip()
    if stripped == "BEGIN IMMEDIATE":
        return WRITER_BEGIN
    if stripped == "BEGIN":
        return "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
    ignore = _OR_IGNORE.match(sql) is not None
    if ignore:
        sql = _OR_IGNORE.sub("INSERT ", sql, count=1)
    sql = _TOKEN.sub(_rewrite, sql)
    if ignore:
        returning = _RETURNING.search(sql)
        if returning is None:
            sql = f"{sql.rstrip().rstrip(';')} ON CONFLICT DO NOTHING"
        else:
            at = returning.start()
            sql = f"{sql[:at]} ON CONFLICT DO NOTHING{sql[at:]}"
    return sql


@lru_cache(maxsize=4096)
def named_parameters(prepared: str) -> bool:
    """True if ``prepared`` binds ``%(pN)s`` names (its parameters go as a mapping)."""
    return _NAMED.search(prepared) is not None


#: The dialect of every PostgreSQL connection.
POSTGRES: Final = PostgresDialect()
