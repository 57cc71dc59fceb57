"""One store transaction, as an embedder or a hook holds it: :class:`SystemTransaction`.

``AgentSystem.transaction(work)`` opens one and runs ``work(t)`` in it; a hook's
``ctx.in_tx(work)`` reuses the transaction its hook already runs in, or opens one. Inside,
``t``'s key-value stores write in the transaction and ``t.send``/``t.steer`` queue their
message (its queue entry, and the owed fact that makes the agent's work resume after a crash)
in it too; every live effect — telling the agent, starting its run, the ledger's subscribers
hearing of the event — happens only after the COMMIT. So the work's writes and messages land
together or not at all, and a raise rolls all of it back, leaving no live effect.

Invariants:

- Delivery inside a transaction never waits for the agent it addresses (nor for any other):
  the message is written through the transaction itself, and the agent, idle, passivated or
  running, hears of it only after the commit. Whatever loads an idle agent then reads
  committed state only.
- ``t`` and the stores it lent are valid only while ``work`` runs: afterwards every use raises
  :class:`~agentkeep.errors.ExpiredScopeError`, even while a hook's enclosing transaction is
  still open.
- Inside, the work runs in the store writer's thread: a command that would wait for the
  writer, an agent or the system, or that has a live effect a rollback could not undo, is
  refused with :class:`~agentkeep.errors.TransactionScopeError` (see ``docs/embedding.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar, Unpack

from agentkeep.delivery import Delivery, SendOptions
from agentkeep.errors import ExpiredScopeError, UnknownAgentError
from agentkeep.key_value import KeyValueStore
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.kv import ScopedKV
from agentkeep.runtime.kv_areas import KV_AREA
from agentkeep.types import QueueableMessage
from agentkeep.types.records import QueueName

T = TypeVar("T")
_TOKEN: Any = object()


class AcceptancePort(Protocol):
    """How a transaction or a reference queues a message: the system's acceptance
    (``agentkeep.agent_system._acceptance.Acceptance``), the one path every ``send`` and
    ``steer`` takes. Declared here, not imported: this layer sits below the system
    (``docs/architecture.md``)."""

    def send(
        self,
        tx: Transaction | None,
        agent_id: str,
        queue: QueueName,
        message: QueueableMessage,
        options: SendOptions,
        *,
        where: str,
    ) -> Delivery:
        """Accept ``message`` inside ``tx`` (told after it commits), or in a transaction of
        its own if None; ``where`` names the surface in a ``TypeError`` for a bad option."""
        ...

    def check_owned(self, agent_id: str) -> None:
        """Raise ``PartitionNotOwnedError`` if this system may not write for ``agent_id``
        (another partition's agent)."""
        ...


class SystemTransaction:
    """One store transaction of an :class:`~agentkeep.AgentSystem`, handed to the work of
    ``system.transaction(work)`` or ``ctx.in_tx(work)`` (no public constructor).

    Its stores and its ``send``/``steer`` commit or roll back with the transaction; what the
    agents are told happens after the commit. Valid only while that work runs.
    """

    __slots__ = ("_acceptance", "_open", "_tx", "sent_to")

    def __init__(self, tx: Transaction, acceptance: AcceptancePort, *, _token: object) -> None:
        if _token is not _TOKEN:
            raise TypeError(
                "SystemTransaction has no public constructor: use system.transaction(work) "
                "or ctx.in_tx(work)"
            )
        self._tx = tx
        self._acceptance = acceptance
        self._open = True
        #: The agents this transaction queued messages for, in order (each once).
        self.sent_to: list[str] = []

    def __repr__(self) -> str:
        return f"SystemTransaction(active={self.active})"

    @property
    def active(self) -> bool:
        """False once the work that was handed this transaction has returned (or raised)."""
        return self._open and self._tx.active

    def _check(self) -> Transaction:
        if not self.active:
            raise ExpiredScopeError(
                "This transaction ended when the work it was handed to returned; open "
                "another with system.transaction(work)."
            )
        return self._tx

    def shared_kv(self, name: str) -> KeyValueStore:
        """The system-wide store ``name``: the one a feature (or module) named ``name`` sees as
        ``ctx.shared_kv``. Its writes commit with this transaction; it expires with it."""
        tx = self._check()
        return ScopedKV.in_transaction(tx, "system", "feature", name).until(lambda: self.active)

    def agent_kv(self, agent_id: str, name: str) -> KeyValueStore:
        """Agent ``agent_id``'s store ``name``: the one a feature named ``name`` sees as
        ``ctx.kv`` in that agent's hooks (it outlives runs; it goes with the agent). Its
        writes commit with this transaction; it expires with it.

        Raises:
            UnknownAgentError: no agent has the id (as this transaction sees it).
            PartitionNotOwnedError: the agent is another partition's.
        """
        tx = self._check()
        self._acceptance.check_owned(agent_id)  # PartitionNotOwnedError: another's agent
        if tx.agents.get(agent_id) is None:
            raise UnknownAgentError(agent_id)
        scope = ScopedKV.in_transaction(tx, "agent", agent_id, KV_AREA, "feature", name)
        return scope.until(lambda: self.active)

    def send(
        self, agent_id: str, message: QueueableMessage, **options: Unpack[SendOptions]
    ) -> Delivery:
        """Queue ``message`` on the agent's send queue inside this transaction; the agent is
        told (an idle one starts) only after the commit. Never waits for the agent.

        The options are :meth:`AgentSystem.send <agentkeep.AgentSystem.send>`'s; a repeated
        ``id`` is an idempotent repeat (``created`` False), as outside a transaction.

        Raises:
            UnknownAgentError: no agent has the id.
            ExpiredScopeError: the transaction has ended.
        """
        return self._deliver(agent_id, "send", message, options, "SystemTransaction.send")

    def steer(
        self, agent_id: str, message: QueueableMessage, **options: Unpack[SendOptions]
    ) -> Delivery:
        """Queue ``message`` on the agent's steering queue inside this transaction (it
        outranks queued sends); otherwise as :meth:`send`."""
        return self._deliver(agent_id, "steering", message, options, "SystemTransaction.steer")

    def _deliver(
        self,
        agent_id: str,
        queue: QueueName,
        message: QueueableMessage,
        options: SendOptions,
        where: str,
    ) -> Delivery:
        tx = self._check()
        delivery = self._acceptance.send(tx, agent_id, queue, message, options, where=where)
        if agent_id not in self.sent_to:
            self.sent_to.append(agent_id)
        return delivery

    def _end(self) -> None:
        self._open = False


def run_within(
    tx: Transaction,
    acceptance: AcceptancePort,
    work: Callable[[SystemTransaction], T],
    *,
    opened: Callable[[SystemTransaction], None] | None = None,
) -> T:
    """Run ``work`` with a :class:`SystemTransaction` over ``tx`` (which it expires when the
    work returns or raises); ``opened`` is told the transaction first (the system keeps it to
    wake the agents it sent to if the commit's outcome is unknown)."""
    scope = SystemTransaction(tx, acceptance, _token=_TOKEN)
    if opened is not None:
        opened(scope)
    try:
        return work(scope)
    finally:
        scope._end()
