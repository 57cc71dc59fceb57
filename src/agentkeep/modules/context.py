"""What a module's system-level hooks are handed: :class:`ModuleContext` (the module's
database access and shared store, the system) and :class:`AgentSnapshot` (an agent's id
and metadata, frozen at the moment of the fact a hook is told about).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from agentkeep.key_value import KeyValueStore
from agentkeep.persistence.interface import StoreHandle, Transaction
from agentkeep.refs import AgentSystemRef


class ModuleDatabase:
    """Raw SQL for the tables a module owns (created by its migrations).

    Inside a migration or a transactional hook it is bound to that transaction: its writes
    commit or roll back with it, and it refuses use once the hook returned. Elsewhere (a
    ``before_start``, an ``after_start``, a post-commit hook) each statement is its own
    transaction through the store's writer (a read runs on a snapshot).

    The store keeps its own tables; a module writes only its own (prefix their names with
    the module's name). Statements use ``?`` placeholders.
    """

    __slots__ = ("_handle", "_tx")

    def __init__(self, *, tx: Transaction | None = None, handle: StoreHandle | None = None):
        if (tx is None) == (handle is None):
            raise TypeError("a ModuleDatabase runs in a transaction or through a store")
        self._tx = tx
        self._handle = handle

    @property
    def in_transaction(self) -> bool:
        """True when bound to a transaction (a migration or a ``…_transact`` hook)."""
        return self._tx is not None

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run one read statement; every row it yields."""
        if self._tx is not None:
            return self._tx.sql.query(sql, params)
        assert self._handle is not None
        return self._handle.read(lambda tx: tx.sql.query(sql, params))

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        """Run one write statement; how many rows it changed."""
        if self._tx is not None:
            return self._tx.sql.execute(sql, params)
        assert self._handle is not None
        return self._handle.transact(lambda tx: tx.sql.execute(sql, params))


@dataclass(frozen=True, kw_only=True)
class ModuleContext:
    """What a module's migrations and system-level hooks receive.

    Attributes:
        module: The module's name.
        system: The system (no owning agent: agents it creates have no parent by default);
            inside a transactional hook its sends join that transaction and reach their
            agents only after it commits.
        shared_kv: The module's own store, shared by the whole system: the same scope as
            the ``shared_kv`` of its per-agent hooks (``feature.<module name>`` of the
            system's store). Bound to the transaction in a migration or ``…_transact`` hook.
        db: Raw SQL for the module's own tables (:class:`ModuleDatabase`), bound the same way.
    """

    module: str
    system: AgentSystemRef
    shared_kv: KeyValueStore
    db: ModuleDatabase


@dataclass(frozen=True)
class AgentSnapshot:
    """An agent's id and metadata as the fact being reported committed them, immutable:
    the metadata is a read-only copy (nested objects are read-only mappings, arrays tuples).
    """

    id: str
    metadata: Mapping[str, Any]

    @classmethod
    def of(cls, agent_id: str, metadata: Mapping[str, Any]) -> AgentSnapshot:
        """The snapshot of ``agent_id`` with a frozen copy of ``metadata``."""
        frozen = _frozen(dict(metadata))
        assert isinstance(frozen, Mapping)
        return cls(agent_id, frozen)


def _frozen(value: Any) -> Any:
    """A deep, read-only copy of a JSON value."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: _frozen(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return value


__all__ = ["AgentSnapshot", "ModuleContext", "ModuleDatabase"]
