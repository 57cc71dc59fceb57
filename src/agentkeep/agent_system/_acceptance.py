"""The one acceptance path: every message from outside an agent's loop is accepted here.

``AgentSystem.send``/``steer``, the references hooks and tools hold (``AgentRef``), and
``Sessions.send`` all call :class:`Acceptance`; it owns, in order:

1. **admission**: the operation is admitted (refused once the system closes, or while the
   agent is being deleted), and close and delete wait for it to finish;
2. **the checks** before anything is written (the message, its id, its provider);
3. **the acceptance transaction**: the native queue (:func:`agentkeep.delivery.accept_message`,
   which the loop's hook actions run too) or a turn of the session's injected driver,
   decided inside the transaction (``_driver_turns``; docs/drivers.md);
4. **the claim**: an idle agent offering its next consumption has it consumed in the same
   transaction (docs/architecture.md, "Commit boundaries of a step");
5. **the post-commit tell**: only after the commit is the agent's actor (or its driver's
   runner) told; a transaction that rolls back leaves no live effect.

Invariant: acceptance never waits for the agent's loop (invariant I26): a tool or hook that
messages its own agent is accepted through the store's writer like any caller.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypedDict, Unpack

from agentkeep._admission import Admission
from agentkeep.actors.agent_tier import AgentTier
from agentkeep.actors.consume_claim import ClaimTold, ConsumeClaim, accept_consuming
from agentkeep.agent_system._driver_turns import prepare_driver_turn
from agentkeep.agent_system._ownership import Ownership
from agentkeep.delivery import Delivery, SendOptions, prepare_acceptance, split_send_options
from agentkeep.drivers.host import DriverHost
from agentkeep.errors import CommitOutcomeUnknownError
from agentkeep.loop.events import Start, WorkAccepted
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.store import Store
from agentkeep.providers.catalog import Providers
from agentkeep.sessions import tables as session_tables
from agentkeep.tracing import current_traceparent
from agentkeep.types import JSONObject, MessageOptions, QueueableMessage, Settings
from agentkeep.types.records import QueuedMessage, QueueName
from agentkeep.types.turns import NATIVE_DRIVER, TurnRecord

_Accept = Callable[[Transaction], tuple[Delivery, QueuedMessage | None]]
#: What an acceptance returns: its delivery, and its turn as the transaction left it.
_Accepted = tuple[Delivery, TurnRecord | None]


class AcceptOptions(TypedDict, total=False):
    """How one message is accepted, declared once for :meth:`Acceptance.accept`,
    :meth:`Acceptance.accept_turn` and ``system.internals.accept``; each may be omitted.

    - ``id``: the message's id; the same id again is an idempotent repeat.
    - ``metadata``: stored with the message.
    - ``options``: the message's provider, model and other per-message choices.
    - ``start`` (default true): false only queues it — the owed fact is written, so the next
      ``open`` or ``start`` resumes it — without starting the agent now (a turn of an
      injected driver runs regardless).
    - ``idempotency_key``: the turn's key (docs/turns.md); a repeat returns the turn it made,
      writing nothing.
    """

    id: str | None
    metadata: JSONObject | None
    options: MessageOptions | None
    start: bool
    idempotency_key: str | None


def _turn_of(tx: Transaction, agent_id: str, delivery: Delivery) -> TurnRecord | None:
    """The turn ``delivery`` opened or joined, as ``tx`` holds it (the writer's memo holds
    the row the acceptance wrote or read)."""
    return None if delivery.turn_id is None else tx.turns.read(agent_id, delivery.turn_id)


def _traced(accept: _Accept, agent_id: str, traceparent: str) -> _Accept:
    """``accept``, storing ``traceparent`` with the turn it opens (in its transaction)."""

    def traced(tx: Transaction) -> tuple[Delivery, QueuedMessage | None]:
        delivery, queued = accept(tx)
        if delivery.created and delivery.turn_id is not None:
            tx.turns.trace(agent_id, delivery.turn_id, traceparent)
        return delivery, queued

    return traced


class Acceptance:
    """The system's acceptance of messages (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        *,
        admission: Admission,
        agents: AgentTier,
        drivers: DriverHost,
        providers: Providers,
        defaults: Settings,
        ownership: Ownership | None = None,
    ) -> None:
        self._store = store
        self._ownership = ownership or Ownership(None)
        self._admission = admission
        self._agents = agents
        self._drivers = drivers
        self._providers = providers
        self._defaults = defaults

    def check_owned(self, agent_id: str) -> None:
        """Raise ``PartitionNotOwnedError`` if ``agent_id`` is another partition's."""
        self._ownership.check(agent_id)

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
        """A ``send``/``steer`` of any surface (``where`` names it in a ``TypeError`` for an
        unknown option): inside ``tx`` (a hook running in a transaction), or as its own
        transaction."""
        id, metadata, chosen = split_send_options(options, where=where)
        if tx is not None:
            return self.within(
                tx, agent_id, queue, message, id=id, metadata=metadata, options=chosen
            )
        return self.accept(agent_id, queue, message, id=id, metadata=metadata, options=chosen)

    def accept(
        self,
        agent_id: str,
        queue: QueueName,
        message: QueueableMessage,
        **how: Unpack[AcceptOptions],
    ) -> Delivery:
        """Queue a message durably and wake the agent; returns once it is durable
        (:class:`AcceptOptions` says what ``how`` may hold)."""
        return self.accept_turn(agent_id, queue, message, **how)[0]

    def accept_turn(
        self,
        agent_id: str,
        queue: QueueName,
        message: QueueableMessage,
        **how: Unpack[AcceptOptions],
    ) -> tuple[Delivery, TurnRecord | None]:
        """:meth:`accept`, and the message's turn as its acceptance transaction committed it
        (``queued``, or ``running`` when consumed there; a repeat's turn as it stood), read
        in that transaction (from the writer's memo): nothing is read after the commit.

        Raises:
            PartitionNotOwnedError: the agent is another partition's (nothing written).
        """
        self._ownership.check(agent_id)
        with self._admission.operation(), self._admission.agent_operation(agent_id):
            return self._accept(
                agent_id,
                queue,
                message,
                how.get("id"),
                how.get("metadata"),
                how.get("options"),
                how.get("start", True),
                how.get("idempotency_key"),
            )

    def _accept(
        self,
        agent_id: str,
        queue: QueueName,
        message: QueueableMessage,
        id: str | None,
        metadata: JSONObject | None,
        options: MessageOptions | None,
        start: bool,
        idempotency_key: str | None = None,
    ) -> _Accepted:
        routed = self._routed(agent_id, queue, message, id, metadata, options, idempotency_key)
        known = self._agents.known(agent_id) if start else None
        claim = None if known is None else known.status.claim
        if claim is not None:
            # The agent is idle and offers its next consumption: accept and consume in one
            # transaction (docs/architecture.md, "Commit boundaries of a step").
            consuming = self._accept_consuming(agent_id, routed, claim)
            if consuming is not None:
                return consuming
            # The consumption raised and rolled everything back: accept alone, as always.

        def work(tx: Transaction) -> tuple[Delivery, QueuedMessage | None, TurnRecord | None]:
            delivery, queued = routed(tx)
            return delivery, queued, _turn_of(tx, agent_id, delivery)

        try:
            delivery, queued, turn = self._store.transact(work)
        except CommitOutcomeUnknownError:
            # It may have landed: wake the agent so a message that did is not left waiting
            # for the next start. The caller re-offers with the same id (idempotent).
            if start:
                self._agents.tell(agent_id, Start(), counted=True)
                self._drivers.wake(agent_id)
            raise
        if queued is not None and start:
            self._agents.tell(agent_id, WorkAccepted(message=queued), counted=True)
        elif queued is None and delivery.created:
            # A driver turn: its runner runs it now, ``start`` or not (a driver turn left
            # queued would only be interrupted at the next open: docs/drivers.md).
            self._drivers.wake(agent_id)
        return delivery, turn

    def _accept_consuming(
        self, agent_id: str, routed: _Accept, claim: ConsumeClaim
    ) -> _Accepted | None:
        """The acceptance, consuming under the idle actor's ``claim`` if it can; None if the
        consumption failed (nothing was committed: the caller accepts alone)."""

        def accept(tx: Transaction) -> tuple[_Accepted, QueuedMessage | None]:
            delivery, queued = routed(tx)
            return (delivery, None), queued

        def finish(tx: Transaction, accepted: _Accepted) -> _Accepted:
            return accepted[0], _turn_of(tx, agent_id, accepted[0])  # after the consumption

        try:
            outcome = accept_consuming(self._store, agent_id, claim, accept, finish)
        except CommitOutcomeUnknownError:
            # As in _accept: it may have landed (consumed, even); the actor reloads.
            self._agents.tell(agent_id, Start(), counted=True)
            self._drivers.wake(agent_id)
            raise
        if outcome is None:
            return None
        (delivery, turn), queued, consumed = outcome
        if consumed:
            self._agents.tell(agent_id, ClaimTold(claim=claim), counted=True)
        elif queued is not None:
            self._agents.tell(agent_id, WorkAccepted(message=queued), counted=True)
        elif delivery.created:
            self._drivers.wake(agent_id)
        return delivery, turn

    def _routed(
        self,
        agent_id: str,
        queue: QueueName,
        message: QueueableMessage,
        id: str | None,
        metadata: JSONObject | None,
        options: MessageOptions | None,
        idempotency_key: str | None,
    ) -> _Accept:
        """The acceptance of a message to ``agent_id``, checked now: the native queue, or a
        turn of the session's injected driver (decided inside the transaction)."""
        native = prepare_acceptance(
            self._providers,
            agent_id,
            queue,
            message,
            message_id=id,
            metadata=metadata,
            options=options,
            defaults=self._defaults,
            idempotency_key=idempotency_key,
        )

        def accept(tx: Transaction) -> tuple[Delivery, QueuedMessage | None]:
            driver = session_tables.session_driver(tx, agent_id)
            if driver == NATIVE_DRIVER:
                return native(tx)
            # Prepared only for a driver's session: its checks are the ones
            # ``prepare_acceptance`` passed above (the message, its id, the key).
            as_driver_turn = prepare_driver_turn(
                self._drivers,
                agent_id,
                queue,
                message,
                message_id=id,
                metadata=metadata,
                options=options,
                idempotency_key=idempotency_key,
            )
            return as_driver_turn(tx, driver), None

        # The caller's current span (a REST request's ``traceparent``): the turn's spans are
        # its children, now and after a restart (docs/observability.md).
        traceparent = current_traceparent()
        return accept if traceparent is None else _traced(accept, agent_id, traceparent)

    def within(
        self,
        tx: Transaction,
        agent_id: str,
        queue: QueueName,
        message: QueueableMessage,
        *,
        id: str | None,
        metadata: JSONObject | None,
        options: MessageOptions | None,
    ) -> Delivery:
        """Queue a message inside ``tx`` (a hook running in a transaction): durable with it,
        and the agent is told only after it committed, so a rollback leaves no live effect."""
        self._ownership.check(agent_id)
        with self._admission.operation(), self._admission.agent_operation(agent_id):
            routed = self._routed(agent_id, queue, message, id, metadata, options, None)
            delivery, queued = routed(tx)
        if queued is not None:
            tx.after_commit(
                lambda: self._agents.tell(agent_id, WorkAccepted(message=queued), counted=True)
            )
        elif delivery.created:
            # A driver turn. Waking may start a runner (an ask to its supervisor): never in
            # the writer's thread, where after-commit callbacks run.
            tx.after_commit(lambda: self._drivers.wake_soon(agent_id))
        return delivery
