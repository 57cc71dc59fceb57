"""What every statement mixin of :class:`~agentkeep.persistence.transaction.SqliteTransaction`
uses of it: the writer's memo and the core statement methods.

Declared here once for the type checker only: ``SqliteTransaction`` defines them, and no
mixin carries a runtime stub that could shadow them in the method resolution order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import apsw

    from agentkeep.persistence.memo import WriterMemo


class TransactionCore:
    """The base of every statement mixin (see the module)."""

    if TYPE_CHECKING:
        # The writer's memo (persistence/memo.py states its invariant).
        _memo: WriterMemo

        def _check(self, *, write: bool) -> None: ...

        def _read(self, sql: str, params: tuple[Any, ...] = ()) -> apsw.Cursor: ...

        def _write(self, sql: str, params: tuple[Any, ...] = ()) -> int: ...

        def _memo_get(self, key: tuple[str, ...]) -> Any: ...

        def _one(self, sql: str, params: tuple[Any, ...] = ()) -> Any: ...
