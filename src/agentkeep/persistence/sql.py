"""``tx.sql``: the sanctioned way for a module that owns its tables (``registry.tables``,
``sessions.tables``) to run its statements inside a store transaction, with the
transaction's scope checks (an expired transaction, a write in a read are refused).

Its SQL goes through the same executor and dialect as every other statement; the memo
cannot follow a raw write, so :meth:`SqlStatements.execute` makes it forget everything.
"""

from __future__ import annotations

from typing import Any

from agentkeep.persistence.executor import TableStatements
from agentkeep.persistence.memo import MISSING

__all__ = ["SqlStatements"]


class SqlStatements(TableStatements):
    """Raw statements of the modules that own their tables (see the module)."""

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run one read statement in this transaction and return every row it yields.

        All rows are fetched before returning: the executor reuses one cursor.
        """
        return list(self._read(sql, params).fetchall())

    def query_remembered(
        self, agent_id: str, sql: str, params: tuple[Any, ...] = ()
    ) -> list[tuple[Any, ...]]:
        """:meth:`query`, its rows remembered by the writer until anything may change them.

        Only for a read of the agent's rows in tables written by :meth:`execute` alone (which
        forgets everything it could change) or by the ``agents`` cascade (``tx.agents.create``
        forgets the agent); e.g. ``sessions`` and the immutable ``definition_revisions``.
        """
        key = ("query", agent_id, sql, *map(repr, params))
        known: tuple[tuple[Any, ...], ...] = self._memo_get(key)
        if known is MISSING:
            known = tuple(self._read(sql, params).fetchall())
            self._memo.put(key, known)
        return list(known)

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        """Run one write statement in this transaction; returns how many rows it changed.
        Refused (``ReadOnlyTransactionError``) in a read. The memo cannot know what it
        changed, so it forgets everything (until the next transaction)."""
        self._check(write=True)
        # Even a statement the executor would follow (a SAVEPOINT of the writer's name). The
        # executor writes the item's buffered events first, so the statement sees them.
        self._memo.clear()
        statements = self._x.statements
        statements.execute(sql, params)
        return statements.changes()
