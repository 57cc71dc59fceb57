"""What every statement object of one transaction shares: the :class:`Executor`, and
:class:`TableStatements`, the base of each per-table statement class.

A transaction (:class:`~agentkeep.persistence.transaction.SqliteTransaction`) builds one
executor over the connection's :class:`~agentkeep.persistence.codec.Statements` (the apsw
cursor, the writer's memo, the dialect) and hands it to each of its statement objects
(``tx.agents``, ``tx.turns``, ``tx.ledger`` …), so they run their SQL in the same scope:

- once the transaction ended (:meth:`Executor.expire`) every statement raises
  :class:`~agentkeep.errors.ExpiredScopeError`;
- in a read (``read_only``) every write raises :class:`ReadOnlyTransactionError`;
- what the store holds is remembered across statements in ``memo``
  (persistence/memo.py states its invariant); a statement object that writes a memoised fact
  records or forgets it once its statement ran.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import apsw

from agentkeep.errors import ExpiredScopeError, StoreError
from agentkeep.persistence.codec import Statements

__all__ = ["Executor", "ReadOnlyTransactionError", "TableStatements", "first"]


class ReadOnlyTransactionError(StoreError):
    """A write was attempted on a read-only snapshot (``StoreHandle.read``)."""

    code = "read_only_transaction"


class Executor:
    """One transaction's scope over the connection's executor (see the module).

    Args:
        statements: The executor of the enclosing SQL transaction.
        read_only: If True every write raises :class:`ReadOnlyTransactionError`.
    """

    __slots__ = ("_after_commit", "active", "memo", "read_only", "statements")

    def __init__(self, statements: Statements, *, read_only: bool = False) -> None:
        self.statements = statements
        self.read_only = read_only
        self.active = True
        self._after_commit: list[Callable[[], None]] = []
        # A new transaction object starts a new work item in the memo.
        self.memo = statements.memo
        self.memo.new_transaction_object()

    def check(self, *, write: bool) -> None:
        """Refuse a statement after the transaction ended, and a write in a read."""
        if not self.active:
            raise ExpiredScopeError("This transaction has ended; start a new one.")
        if write and self.read_only:
            raise ReadOnlyTransactionError("This is a read-only snapshot; use transact().")

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` (in the writer's thread) once the enclosing COMMIT succeeded."""
        self.check(write=False)
        if self.read_only:
            raise ReadOnlyTransactionError("after_commit is meaningless in a read.")
        self._after_commit.append(callback)

    def expire(self) -> list[Callable[[], None]]:
        """End the scope; returns the registered after-commit callbacks."""
        self.active = False
        callbacks, self._after_commit = self._after_commit, []
        return callbacks


class TableStatements:
    """The base of a per-table statement class: its statements run through ``executor``.

    The helpers below are the only way a statement class reaches SQL; each checks the scope
    first. ``_write`` is only for statements whose method keeps the memo true (see
    ``Statements.write``).
    """

    def __init__(self, executor: Executor) -> None:
        self._x = executor
        self._memo = executor.memo

    def _check(self, *, write: bool) -> None:
        self._x.check(write=write)

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> apsw.Cursor:
        x = self._x
        if not x.active:
            x.check(write=False)
        return x.statements.execute(sql, params)

    def _write(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        x = self._x
        if not x.active or x.read_only:
            x.check(write=True)
        statements = x.statements
        statements.write(sql, params)
        return statements.changes()

    def _send(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        """``_write`` for a statement whose change count nobody reads: a backend may send it
        without waiting for it (``Statements.send``: its failure fails the work item by its
        next statement that waits, or its end)."""
        x = self._x
        if not x.active or x.read_only:
            x.check(write=True)
        x.statements.send(sql, params)

    def _memo_get(self, key: tuple[str, ...]) -> Any:
        x = self._x
        if not x.active:
            x.check(write=False)
        return self._memo.get(key)

    def _one(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        row = first(self._read(sql, params))
        return None if row is None else row[0]


def first(cursor: Any) -> Any:
    """The first row of a read (None if none), its statement run to the end: a statement
    left mid-result keeps a read transaction open on the writer's connection, and a
    checkpoint there then fails with SQLITE_LOCKED ("database table is locked")."""
    rows = cursor.fetchall()
    return rows[0] if rows else None
