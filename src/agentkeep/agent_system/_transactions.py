"""Transactions an embedder opens (``AgentSystem.transaction``), and the commands refused
inside any store transaction (:func:`outside_transaction`).

Why a function and not a ``with`` block: the store has one writer thread and one writing
connection, and a transaction is a work function that thread runs (group commit, savepoints,
after-commit callbacks and the refusal below all hinge on it). A ``with system.transaction()
as t:`` block would run in the caller's thread while holding that writer: every other
writer of the process (each agent's commits) would stall behind arbitrary caller code, a
write would have to cross threads onto the writer's connection, and a ``system.send`` in the
block would queue behind the very transaction its caller holds — a deadlock the writer
cannot see, because the waiting thread is not its own. As a function, the work runs on the
writer's thread, where "inside a transaction" is the thread itself: every command that would
wait for the writer (or for an agent that waits for it) is recognised and refused at once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from agentkeep._admission import Admission
from agentkeep.actors.agent_tier import AgentTier
from agentkeep.drivers.host import DriverHost
from agentkeep.errors import CommitOutcomeUnknownError, TransactionScopeError
from agentkeep.loop.events import Start
from agentkeep.persistence.handle import in_store_transaction
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.store import Store
from agentkeep.system_transaction import AcceptancePort, SystemTransaction, run_within

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

_HINTS = {
    "send": "Use the transaction's send (t.send) to queue a message inside it.",
    "steer": "Use the transaction's steer (t.steer) to queue a message inside it.",
    "transaction": "Use the transaction you were given (a hook's ctx.in_tx reuses its own).",
}


def outside_transaction(method: Callable[P, R]) -> Callable[P, R]:
    """Refuse ``method`` inside a store transaction (a writer's thread: a transaction's
    work, a transactional hook or tool) with a :class:`TransactionScopeError` naming it,
    instead of letting it wait for the writer its caller holds."""
    command = method.__qualname__
    hint = _HINTS.get(method.__name__, "")

    @functools.wraps(method)
    def refusing(*args: P.args, **kwargs: P.kwargs) -> R:
        if in_store_transaction():
            raise TransactionScopeError(command, hint)
        return method(*args, **kwargs)

    return refusing


class Transactions:
    """``AgentSystem.transaction``: one store transaction for an embedder's work."""

    def __init__(
        self,
        store: Store,
        *,
        admission: Admission,
        acceptance: AcceptancePort,
        agents: AgentTier,
        drivers: DriverHost,
    ) -> None:
        self._store = store
        self._admission = admission
        self._acceptance = acceptance
        self._agents = agents
        self._drivers = drivers

    def run(self, work: Callable[[SystemTransaction], T]) -> T:
        """``AgentSystem.transaction`` (documented there)."""
        opened: list[SystemTransaction] = []

        def inside(tx: Transaction) -> T:
            return run_within(tx, self._acceptance, work, opened=opened.append)

        with self._admission.operation():
            try:
                return self._store.transact(inside)
            except CommitOutcomeUnknownError:
                # It may have landed, yet no after-commit callback told anyone: wake every
                # agent it sent to, so a message that did land is not left for the next open.
                for agent_id in opened[0].sent_to if opened else ():
                    self._agents.tell(agent_id, Start(), counted=True)
                    self._drivers.wake(agent_id)
                raise
