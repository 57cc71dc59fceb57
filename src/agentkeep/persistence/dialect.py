"""The one seam where SQL text meets a backend: a :class:`Dialect`.

Every statement class writes its SQL once, in SQLite's spelling, and hands it to the
executor (:class:`~agentkeep.persistence.codec.Statements`), the only place SQL reaches a
connection; the executor runs it through its dialect's :meth:`Dialect.prepare` first. So a
second backend supplies a dialect and a connection, not a second set of statement classes
(PostgreSQL's: :mod:`agentkeep.persistence.postgres.dialect`).

What our statements use of SQLite's spelling, which another dialect's ``prepare`` rewrites
(and nothing else differs): ``?`` and ``?N`` parameters; ``INSERT OR IGNORE`` (PostgreSQL:
``ON CONFLICT DO NOTHING``); ``json_extract(column, '$.a.b')``; ``rowid`` as insertion
order; ``LIMIT -1`` for no limit; ``IS NOT`` as null-safe inequality. ``ON CONFLICT … DO
UPDATE … excluded.`` and ``RETURNING`` are spelled the same in both.
"""

from __future__ import annotations

from typing import Final, Protocol

__all__ = ["SQLITE", "Dialect", "SqliteDialect"]


class Dialect(Protocol):
    """How one backend spells the SQL our statements are written in (see the module)."""

    @property
    def name(self) -> str:
        """The backend's name (``"sqlite"``)."""
        ...

    @property
    def translates(self) -> bool:
        """False if :meth:`prepare` returns its argument unchanged (the executor then skips
        the call: one statement is a few microseconds, and steps run dozens)."""
        ...

    def prepare(self, sql: str) -> str:
        """``sql`` (SQLite's spelling) as this backend runs it; pure, so it may be cached."""
        ...


class SqliteDialect:
    """SQLite: the statements' own spelling, run as written."""

    name: Final = "sqlite"
    translates: Final = False

    def prepare(self, sql: str) -> str:
        return sql


#: The dialect of every SQLite connection.
SQLITE: Final = SqliteDialect()
