"""``KeyValueStore``: what a hook's or a tool's key-value stores offer (``ctx.kv`` …).

The runtime hands out scoped stores over the one ``kv`` table (see
:mod:`agentkeep.persistence.kv`); this protocol is the part of them that is public API.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class KeyValueStore(Protocol):
    """A key-value store confined to one scope.

    Values are JSON-compatible (msgspec encodes them). ``None`` means "absent" and cannot be
    stored; delete the key instead. Keys and segments are non-empty strings. A store lent
    to a transaction or a call raises :class:`~agentkeep.errors.ExpiredScopeError` once
    that scope ended.
    """

    def read(self, key: str) -> Any | None:
        """The value at ``key``, or None."""
        ...

    def list(self, prefix: str = "") -> list[tuple[str, Any]]:
        """``(key, value)`` of this scope's own keys starting with ``prefix``, by key."""
        ...

    def write(self, key: str, value: Any) -> None:
        """Set ``key`` to ``value`` (not None)."""
        ...

    def write_if_absent(self, key: str, value: Any) -> bool:
        """Set ``key`` only if it is absent; True if this call wrote it."""
        ...

    def compare_and_set(self, key: str, expected: Any | None, value: Any) -> bool:
        """Set ``key`` to ``value`` only if it currently holds ``expected`` (None: absent)."""
        ...

    def delete(self, key: str) -> bool:
        """Delete ``key``; True if it was present."""
        ...

    def clear(self) -> int:
        """Delete everything in this scope, nested scopes included; returns how many."""
        ...

    def get_or_create(self, key: str, factory: Callable[[], Any]) -> Any:
        """The value at ``key``, or ``factory()`` stored there first (allocated once)."""
        ...

    def scoped(self, *segments: str) -> KeyValueStore:
        """The nested scope ``segments`` (which expires with this one)."""
        ...
