"""Scoped key-value stores over the one sorted ``kv`` table.

A scope is a path of segments; its raw key prefix is each segment escaped and followed by
``.``. Escaping (``%`` → ``%25``, ``.`` → ``%2E``) maps every string to one without a bare
``.``, and is prefix-free, so:

- ``("a.b",)`` and ``("a", "b")`` never alias (``a%2Eb.`` vs ``a.b.``);
- a key never collides with a nested scope (keys are escaped too, so the part of a raw key
  after its scope's prefix contains a bare ``.`` exactly when it lies in a nested scope);
- a prefix scan on an escaped prefix finds exactly the keys that start with the unescaped
  prefix.

A :class:`ScopedKV` runs either inside a :class:`~agentkeep.persistence.interface.Transaction`
(its writes commit or roll back with the transaction, and it refuses use once the
transaction ended) or against a :class:`~agentkeep.persistence.interface.StoreHandle`
(each operation is its own transaction through the writer).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeAlias, TypeVar

from agentkeep.errors import ExpiredScopeError
from agentkeep.persistence.interface import StoreHandle, Transaction
from agentkeep.persistence.kv_keys import check_name, escape_segment, scope_prefix, unescape_segment

T = TypeVar("T")
Entries: TypeAlias = list[tuple[str, Any]]


class _Backend(Protocol):
    def run(self, op: Callable[[Transaction], T], *, write: bool) -> T: ...


class _TransactionBackend:
    """Runs every operation in one lent transaction; refuses use after it ended."""

    def __init__(self, tx: Transaction) -> None:
        self._tx = tx

    def run(self, op: Callable[[Transaction], T], *, write: bool) -> T:
        if not self._tx.active:
            raise ExpiredScopeError(
                "This key-value store was lent to a transaction that has ended."
            )
        return op(self._tx)


class _HandleBackend:
    """Runs each operation as its own transaction (reads on a reader snapshot)."""

    def __init__(self, handle: StoreHandle) -> None:
        self._handle = handle

    def run(self, op: Callable[[Transaction], T], *, write: bool) -> T:
        if write:
            return self._handle.transact(op)
        return self._handle.read(op)


class _GuardedBackend:
    """Refuses use once ``alive()`` turns False (call KV, history KV)."""

    def __init__(self, inner: _Backend, alive: Callable[[], bool]) -> None:
        self._inner = inner
        self._alive = alive

    def run(self, op: Callable[[Transaction], T], *, write: bool) -> T:
        if not self._alive():
            raise ExpiredScopeError("This key-value store's scope has ended.")
        return self._inner.run(op, write=write)


class _CheckedBackend:
    """Runs ``check(tx)`` first in each operation's own transaction (history KV): the check
    and the operation see one state, so no operation runs after the check turned False."""

    def __init__(self, inner: _Backend, check: Callable[[Transaction], bool]) -> None:
        self._inner = inner
        self._check = check

    def run(self, op: Callable[[Transaction], T], *, write: bool) -> T:
        check = self._check

        def checked(tx: Transaction) -> T:
            if not check(tx):
                raise ExpiredScopeError(
                    "This key-value store's scope has ended (the history it belonged to was "
                    "replaced)."
                )
            return op(tx)

        return self._inner.run(checked, write=write)


class ScopedKV:
    """A key-value store confined to one scope of the ``kv`` table.

    Values are JSON-compatible (msgspec encodes them). ``None`` means "absent" and cannot be
    stored; delete the key instead. Keys and segments are non-empty strings.
    """

    def __init__(self, backend: _Backend, prefix: str = "") -> None:
        self._backend = backend
        self._prefix = prefix

    @classmethod
    def in_transaction(cls, tx: Transaction, *segments: str) -> ScopedKV:
        """A store bound to ``tx``: it raises ``ExpiredScopeError`` once ``tx`` ended."""
        return cls(_TransactionBackend(tx), scope_prefix(*segments))

    @classmethod
    def through(cls, handle: StoreHandle, *segments: str) -> ScopedKV:
        """A store that runs each operation as its own transaction through ``handle``."""
        return cls(_HandleBackend(handle), scope_prefix(*segments))

    @property
    def prefix(self) -> str:
        """The raw (escaped) key prefix of this scope."""
        return self._prefix

    def scoped(self, *segments: str) -> ScopedKV:
        """The nested scope ``segments`` (which expires with this one)."""
        return ScopedKV(self._backend, self._prefix + scope_prefix(*segments))

    def until(self, alive: Callable[[], bool]) -> ScopedKV:
        """This scope, refusing use (``ExpiredScopeError``) once ``alive()`` is False."""
        return ScopedKV(_GuardedBackend(self._backend, alive), self._prefix)

    def checked(self, check: Callable[[Transaction], bool]) -> ScopedKV:
        """This scope, each operation first running ``check(tx)`` inside its own transaction
        and refusing (``ExpiredScopeError``) when it is False: a durable validity test (the
        history KV's generation) that no operation can slip past."""
        return ScopedKV(_CheckedBackend(self._backend, check), self._prefix)

    def _key(self, key: str) -> str:
        check_name(key, "key")
        return self._prefix + escape_segment(key)

    def read(self, key: str) -> Any | None:
        """The value at ``key``, or None."""
        raw = self._key(key)
        return self._backend.run(lambda tx: tx.kv.read(raw), write=False)

    def list(self, prefix: str = "") -> Entries:
        """``(key, value)`` of this scope's own keys starting with ``prefix``, by key.

        Entries of nested scopes are not listed (list those through :meth:`scoped`).
        """
        scan = self._prefix + escape_segment(prefix)
        start = len(self._prefix)
        rows = self._backend.run(lambda tx: tx.kv.scan(scan), write=False)
        # A bare "." after the scope prefix means the entry belongs to a nested scope.
        entries = [
            (unescape_segment(raw[start:]), value) for raw, value in rows if "." not in raw[start:]
        ]
        # Escaped order differs from key order ("%2E" sorts before "-"), so sort unescaped.
        entries.sort(key=lambda entry: entry[0])
        return entries

    def write(self, key: str, value: Any) -> None:
        """Set ``key`` to ``value`` (not None)."""
        raw = self._key(key)
        self._backend.run(lambda tx: tx.kv.write(raw, value), write=True)

    def write_if_absent(self, key: str, value: Any) -> bool:
        """Set ``key`` only if it is absent; True if this call wrote it."""
        raw = self._key(key)
        return self._backend.run(lambda tx: tx.kv.write_if_absent(raw, value), write=True)

    def compare_and_set(self, key: str, expected: Any | None, value: Any) -> bool:
        """Set ``key`` to ``value`` only if it currently holds ``expected`` (None: absent)."""
        raw = self._key(key)
        return self._backend.run(lambda tx: tx.kv.compare_and_set(raw, expected, value), write=True)

    def delete(self, key: str) -> bool:
        """Delete ``key``; True if it was present."""
        raw = self._key(key)
        return self._backend.run(lambda tx: tx.kv.delete(raw), write=True)

    def clear(self) -> int:
        """Delete everything in this scope, nested scopes included; returns how many."""
        prefix = self._prefix
        return self._backend.run(lambda tx: tx.kv.clear(prefix), write=True)

    def get_or_create(self, key: str, factory: Callable[[], Any]) -> Any:
        """The value at ``key``, or ``factory()`` stored there first (allocated once).

        Read and write happen in one transaction, so concurrent callers all get the value
        the first one stored and ``factory`` runs at most once per stored value. Inside a
        transaction it joins it (the value commits or rolls back with it). Outside one, a
        value already stored is read without a write transaction; otherwise ``factory`` runs
        in the writer's thread (keep it quick, and let it not call the store: it runs inside
        the writer's transaction). ``factory()`` returning None raises ``ValueError``.
        """
        raw = self._key(key)
        if not isinstance(self._backend, _TransactionBackend):
            # The common case, allocated already: read first, with no writer round trip
            # through a handle (a reader snapshot).
            found = self._backend.run(lambda tx: tx.kv.read(raw), write=False)
            if found is not None:
                return found

        def op(tx: Transaction) -> Any:
            existing = tx.kv.read(raw)
            if existing is not None:
                return existing
            created = factory()
            tx.kv.write(raw, created)
            return created

        return self._backend.run(op, write=True)
