"""Durable state: one database per system (a SQLite file, or a schema on a PostgreSQL
server: :mod:`agentkeep.persistence.postgres`), written only by the StoreWriter actor.

Open a store with :func:`agentkeep.persistence.opening.open_store` (or :meth:`Store.open`
for a SQLite file); hand ``store.handle`` (a :class:`StoreHandle`) to the rest of the
runtime. Work runs as ``work(tx)`` inside a group-committed transaction; see
:mod:`agentkeep.persistence.writer`. The store and its writer are each one class owning the
part that differs per database (``Store`` a ``Database``, ``StoreWriter`` a
``WriterBackend``).

Internal: no part of the public API (see "Public and internal" in ``docs/architecture.md``);
:class:`FaultPlan` is re-exported by :mod:`agentkeep.chaos`.
"""

from agentkeep.persistence.faults import (
    FAULT_AT_ENV,
    FAULT_MODE_ENV,
    FaultMode,
    FaultPlan,
    InjectedFaultError,
)
from agentkeep.persistence.interface import StoreHandle, Transaction
from agentkeep.persistence.kv import ScopedKV
from agentkeep.persistence.kv_keys import agent_prefix, escape_segment, scope_prefix
from agentkeep.persistence.lock import StoreLock
from agentkeep.persistence.schema import MIGRATIONS, SCHEMA_VERSION, Migration
from agentkeep.persistence.store import DATABASE_NAME, HOME_ENV, LOCK_NAME, Store, resolve_home
from agentkeep.persistence.transaction import ReadOnlyTransactionError, SqliteTransaction
from agentkeep.persistence.writer import StoreWriter, StoreWriterHandle, WriterStatistics

__all__ = [
    "DATABASE_NAME",
    "FAULT_AT_ENV",
    "FAULT_MODE_ENV",
    "HOME_ENV",
    "LOCK_NAME",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "FaultMode",
    "FaultPlan",
    "InjectedFaultError",
    "Migration",
    "ReadOnlyTransactionError",
    "ScopedKV",
    "SqliteTransaction",
    "Store",
    "StoreHandle",
    "StoreLock",
    "StoreWriter",
    "StoreWriterHandle",
    "Transaction",
    "WriterStatistics",
    "agent_prefix",
    "escape_segment",
    "resolve_home",
    "scope_prefix",
]
