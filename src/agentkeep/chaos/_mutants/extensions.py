"""Mutants of the extension surface, one per check of the ``extensions`` suite (tests only).

- :func:`inference_boundary_asked_again_after_a_restart` (``E2``): the load forgets that the
  owed inference's stage was opened (``OwedWork.stage_opened_at``), so a restart between the
  stage and the request opens it again: the boundary's notice is appended a second time.
- :func:`history_kv_kept_across_compaction` (``E3``): erasing the history KV only starts its
  next generation and erases nothing, so the old history's keys outlive it.
- :func:`migration_recorded_before_it_ran` (``E1``): each migration's key is recorded in a
  transaction of its own before the migration runs in another: a crash between the two
  leaves a recorded key whose migration never ran (and never will).
- :func:`send_published_before_commit` (``E4``): a send inside a transaction is handed to
  the ordinary acceptance at once instead of being written in the transaction, so it lands
  whatever the transaction does: a rolled-back transaction's message still runs. (Telling
  the agent early alone would not do: an agent consumes only what is durable.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import msgspec

from agentkeep.chaos._mutants.patching import patched
from agentkeep.delivery import Delivery, DeliveryKind
from agentkeep.errors import ModuleMigrationError
from agentkeep.loop import loading
from agentkeep.modules._runtime import ModuleRuntime
from agentkeep.persistence.interface import Transaction
from agentkeep.runtime import commit_plans, history_kv
from agentkeep.runtime.kv_areas import HISTORY_AREA, area_prefix
from agentkeep.system_transaction import SystemTransaction
from agentkeep.types.records import QueueName


@contextmanager
def inference_boundary_asked_again_after_a_restart() -> Iterator[None]:
    """While active, a loaded snapshot's owed fact never says its stage was opened."""
    original = loading.loaded

    def loaded(ctx: Any, snapshot: Any) -> Any:
        if snapshot.owed is not None and snapshot.owed.stage_opened_at is not None:
            owed = msgspec.structs.replace(snapshot.owed, stage_opened_at=None)
            snapshot = msgspec.structs.replace(snapshot, owed=owed)
        return original(ctx, snapshot)

    with patched(loading, "loaded", loaded):
        yield


@contextmanager
def history_kv_kept_across_compaction() -> Iterator[None]:
    """While active, a history's replacement keeps its history KV (the generation moves on,
    so old handles still expire: only the erasure is missing)."""

    erase = history_kv.erase_history_kv  # what commit_plans calls, patched there

    def keep(tx: Transaction, agent_id: str) -> int:
        kept = tx.kv.scan(area_prefix(agent_id, HISTORY_AREA))
        generation = erase(tx, agent_id)
        for key, value in kept:
            tx.kv.write(key, value)
        return generation

    with patched(commit_plans, "erase_history_kv", keep):
        yield


@contextmanager
def migration_recorded_before_it_ran() -> Iterator[None]:
    """While active, each missing migration's key is committed first, then its work."""

    def migrate(self: ModuleRuntime) -> list[tuple[str, str]]:
        applied: list[tuple[str, str]] = []
        for module in self._modules:
            name = module.name
            for key, migration in module.migrations:

                def record(tx: Transaction, name: str = name, key: str = key) -> bool:
                    query = "SELECT 1 FROM module_migrations WHERE module = ? AND key = ?"
                    if tx.sql.query(query, (name, key)):
                        return False
                    tx.sql.execute(
                        "INSERT INTO module_migrations (module, key, applied_at_ms) "
                        "VALUES (?, ?, ?)",
                        (name, key, time.time_ns() // 1_000_000),
                    )
                    return True

                def work(
                    tx: Transaction, name: str = name, run: Callable[..., None] = migration
                ) -> None:
                    run(self.context(name, tx))

                try:
                    if self._store.transact(record):
                        self._store.transact(work)
                        applied.append((name, key))
                except Exception as error:
                    raise ModuleMigrationError(name, key, error) from error
        return applied

    with patched(ModuleRuntime, "migrate", migrate):
        yield


@contextmanager
def send_published_before_commit() -> Iterator[None]:
    """While active, a send inside a transaction is not written in it: it is handed at once
    to the ordinary acceptance (a transaction of its own, queued behind this one on the
    writer), so it lands whatever this transaction does — a rolled-back transaction's
    message still runs, and a crash may keep the messages without the KV write."""

    def deliver(
        self: SystemTransaction,
        agent_id: str,
        queue: QueueName,
        message: Any,
        options: Any,
        where: str,
    ) -> Delivery:
        self._check()
        acceptance = self._acceptance

        def publish() -> None:
            try:
                acceptance.send(None, agent_id, queue, message, options, where=where)
            except Exception:  # a dying or closing system: nothing was published
                return

        threading.Thread(target=publish, name="published-before-commit", daemon=True).start()
        message_id = options.get("id") or ""
        kind: DeliveryKind = "send" if queue == "send" else "steer"
        return Delivery(id=message_id, delivery=kind, created=True)

    with patched(SystemTransaction, "_deliver", deliver):
        yield


EXTENSION_MUTANTS: dict[str, Callable[[], Any]] = {
    "inference_boundary_asked_again_after_a_restart": (
        inference_boundary_asked_again_after_a_restart
    ),
    "history_kv_kept_across_compaction": history_kv_kept_across_compaction,
    "migration_recorded_before_it_ran": migration_recorded_before_it_ran,
    "send_published_before_commit": send_published_before_commit,
}

__all__ = [
    "EXTENSION_MUTANTS",
    "history_kv_kept_across_compaction",
    "inference_boundary_asked_again_after_a_restart",
    "migration_recorded_before_it_ran",
    "send_published_before_commit",
]
