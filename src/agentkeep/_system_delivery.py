"""The delivery surface of ``AgentSystem``: accepting messages (``send``/``steer``/``deliver``,
a transaction through the writer that never waits for the agent's loop, and only then telling
the agent's actor), and the requests to a running agent (``abort``, ``compact``, ``wake``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from agentkeep._system_reads import SystemReads
from agentkeep.actors.consume_claim import ClaimTold, ConsumeClaim, accept_consuming
from agentkeep.actors.loop_thread import current_loop_agent
from agentkeep.delivery import Delivery, prepare_acceptance
from agentkeep.drivers.host import DriverHost
from agentkeep.errors import AwaitFromOwnLoopError, CommitOutcomeUnknownError
from agentkeep.loop.events import AbortRequested, CompactRequested, Start, WorkAccepted
from agentkeep.persistence.interface import Transaction
from agentkeep.providers.registry import Providers
from agentkeep.runtime import session_turns
from agentkeep.sessions import tables as session_tables
from agentkeep.types import (
    JSONObject,
    MessageOptions,
    PermissionMode,
    QueueableMessage,
    QueuedMessage,
    QueueName,
    ReasoningEffort,
    ServiceTier,
)
from agentkeep.types.turns import NATIVE_DRIVER

T = TypeVar("T")


class SystemDelivery(SystemReads):
    """``AgentSystem``'s delivery (a mixin: ``AgentSystem.__init__`` sets the attributes)."""

    # Declared for the type checker only: a runtime annotation would make these
    # internals look like fields of the public ``AgentSystem``.
    if TYPE_CHECKING:
        _providers: Providers
        _drivers: DriverHost

    def send(
        self,
        agent_id: str,
        message: QueueableMessage,
        *,
        id: str | None = None,
        metadata: JSONObject | None = None,
        provider: str | None = None,
        model: str | None = None,
        effort: ReasoningEffort | None = None,
        service_tier: ServiceTier | None = None,
        permission_mode: PermissionMode | None = None,
        profile: str | None = None,
    ) -> Delivery:
        """Queue ``message`` on the agent's send queue; returns once it is durable.

        Args:
            agent_id: The agent (``UnknownAgentError`` if it was never created).
            message: A user, system or agent message (``ak.user(...)``).
            id: The message's id: offering the same id again is an idempotent repeat.
            metadata: Stored with the message, shown to ``message_accepted`` hooks.
            provider: Switch to this provider when the message is consumed.
            model: Switch to this model when the message is consumed.
            effort: Reasoning effort from this message on.
            service_tier: Service tier from this message on.
            permission_mode: Permission mode from this message on.
            profile: The opaque profile this message selects (None when omitted: every
                message selects one; it never persists to the next). It is durable control
                data, never sent to the provider; when the profile in effect changes at
                consumption the private model history resets (archived, still readable) and
                a fresh provider session starts, with ``model_changed`` handling the handoff.
        """
        return self._offer(
            None,
            agent_id,
            "send",
            message,
            id=id,
            metadata=metadata,
            provider=provider,
            model=model,
            effort=effort,
            service_tier=service_tier,
            permission_mode=permission_mode,
            profile=profile,
        )

    def steer(
        self,
        agent_id: str,
        message: QueueableMessage,
        *,
        id: str | None = None,
        metadata: JSONObject | None = None,
        provider: str | None = None,
        model: str | None = None,
        effort: ReasoningEffort | None = None,
        service_tier: ServiceTier | None = None,
        permission_mode: PermissionMode | None = None,
        profile: str | None = None,
    ) -> Delivery:
        """Queue ``message`` on the steering queue (it outranks queued sends); the options
        are :meth:`send`'s."""
        return self._offer(
            None,
            agent_id,
            "steering",
            message,
            id=id,
            metadata=metadata,
            provider=provider,
            model=model,
            effort=effort,
            service_tier=service_tier,
            permission_mode=permission_mode,
            profile=profile,
        )

    def _offer(
        self,
        tx: Transaction | None,
        agent_id: str,
        queue: QueueName,
        message: QueueableMessage,
        *,
        id: str | None,
        metadata: JSONObject | None,
        provider: str | None,
        model: str | None,
        effort: ReasoningEffort | None,
        service_tier: ServiceTier | None,
        permission_mode: PermissionMode | None,
        profile: str | None,
    ) -> Delivery:
        """Every ``send``/``steer`` of every surface (``Agent``, ``AgentRef``, the system and
        its reference) ends here, so they cannot disagree: inside ``tx`` (a hook running in
        a transaction) or as its own transaction."""
        options = MessageOptions(
            provider=provider,
            model=model,
            effort=effort,
            service_tier=service_tier,
            permission_mode=permission_mode,
            profile=profile,
        )
        if tx is not None:
            return self._deliver_within(
                tx, agent_id, queue, message, id=id, metadata=metadata, options=options
            )
        return self.deliver(agent_id, queue, message, id=id, metadata=metadata, options=options)

    def deliver(
        self,
        agent_id: str,
        queue: QueueName,
        message: QueueableMessage,
        *,
        id: str | None = None,
        metadata: JSONObject | None = None,
        options: MessageOptions | None = None,
        start: bool = True,
        idempotency_key: str | None = None,
    ) -> Delivery:
        """Queue a message durably and wake the agent; returns once it is durable.

        ``start=False`` only queues it (the owed fact is written, so the next ``open`` or
        ``start`` resumes it) without starting the agent now (a turn of an injected driver
        runs regardless). ``idempotency_key``: the
        turn's key (docs/turns.md); a repeat returns the turn it made, writing nothing.
        """
        with self._admission.operation(), self._admission.agent_operation(agent_id):
            return self._deliver(
                agent_id, queue, message, id, metadata, options, start, idempotency_key
            )

    def _deliver(
        self,
        agent_id: str,
        queue: QueueName,
        message: QueueableMessage,
        id: str | None,
        metadata: JSONObject | None,
        options: MessageOptions | None,
        start: bool,
        idempotency_key: str | None = None,
    ) -> Delivery:
        accept = prepare_acceptance(
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
        routed = self._routed(
            agent_id, queue, message, accept, id, metadata, options, idempotency_key
        )
        known = self._agents.known(agent_id) if start else None
        claim = None if known is None else known.status.claim
        if claim is not None:
            # The agent is idle and offers its next consumption: accept and consume in one
            # transaction (docs/architecture.md, "Commit boundaries of a step").
            consuming = self._deliver_consuming(agent_id, routed, claim)
            if consuming is not None:
                return consuming
            # The consumption raised and rolled everything back: accept alone, as always.
        try:
            delivery, queued = self._store.transact(routed)
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
        return delivery

    def _deliver_consuming(
        self,
        agent_id: str,
        routed: Callable[[Transaction], tuple[Delivery, QueuedMessage | None]],
        claim: ConsumeClaim,
    ) -> Delivery | None:
        """The acceptance, consuming under the idle actor's ``claim`` if it can; None if the
        consumption failed (nothing was committed: the caller accepts alone)."""
        try:
            outcome = accept_consuming(self._store, agent_id, claim, routed)
        except CommitOutcomeUnknownError:
            # As in _deliver: it may have landed (consumed, even); the actor reloads.
            self._agents.tell(agent_id, Start(), counted=True)
            self._drivers.wake(agent_id)
            raise
        if outcome is None:
            return None
        delivery, queued, consumed = outcome
        if consumed:
            self._agents.tell(agent_id, ClaimTold(claim=claim), counted=True)
        elif queued is not None:
            self._agents.tell(agent_id, WorkAccepted(message=queued), counted=True)
        elif delivery.created:
            self._drivers.wake(agent_id)
        return delivery

    def _routed(
        self,
        agent_id: str,
        queue: QueueName,
        message: QueueableMessage,
        native: Callable[[Transaction], tuple[Delivery, QueuedMessage | None]],
        id: str | None,
        metadata: JSONObject | None,
        options: MessageOptions | None,
        idempotency_key: str | None,
    ) -> Callable[[Transaction], tuple[Delivery, QueuedMessage | None]]:
        """The acceptance of a message to ``agent_id``: the native queue, or a turn of the
        session's injected driver (decided inside the transaction: docs/drivers.md)."""
        as_driver_turn = self._drivers.prepare(
            agent_id,
            queue,
            message,
            message_id=id,
            metadata=metadata,
            options=options,
            idempotency_key=idempotency_key,
        )

        def accept(tx: Transaction) -> tuple[Delivery, QueuedMessage | None]:
            driver = session_tables.session_driver(tx, agent_id)
            if driver == NATIVE_DRIVER:
                return native(tx)
            return as_driver_turn(tx, driver), None

        return accept

    def _deliver_within(
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
        with self._admission.operation(), self._admission.agent_operation(agent_id):
            accept = prepare_acceptance(
                self._providers,
                agent_id,
                queue,
                message,
                message_id=id,
                metadata=metadata,
                options=options,
                defaults=self._defaults,
            )
            routed = self._routed(agent_id, queue, message, accept, id, metadata, options, None)
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

    def abort(
        self, agent_id: str, *, wait: bool = False, timeout_seconds: float | None = None
    ) -> None:
        """Abort the agent's running turn (a no-op when it has none). The turn ends
        ``cancelled``: it is ``cancelling`` durably before the loop hears of the abort
        (docs/turns.md), with the input steers joined to it that still waited, and
        ``cancelled`` once the aborted work stopped (with ``wait``), or when the run
        settles. The turns queued behind it then run.

        Raises:
            UnknownAgentError: the agent was never created.
        """
        self._refuse_own_wait(agent_id, wait)
        known = self._agents.known(agent_id)
        if known is None:
            self._require(agent_id)
            return  # an agent with no actor has no turn to abort
        # None: no turn was running; else whether the marking took back steers still queued.
        took_back = self._mark_turns(agent_id, "running", session_turns.cancelling)
        known.status.abort_pending = True  # a hook running now loses its actions
        if not self._agents.tell_if_live(agent_id, AbortRequested()):
            known.status.abort_pending = False
            return
        if took_back is None:
            if wait:
                known.status.wait_for_idle(timeout_seconds)
            return
        # A turn was cancelled: the turns queued behind it run, and a run that stopped on
        # a steer's input the marking took back (the loop's mirror still holds it) settles.
        if not wait:
            # A Start the aborted run takes up once it has stopped (loop.transitions.stop).
            if took_back or self._read(lambda tx: bool(tx.queue.messages(agent_id))):
                self.wake(agent_id)
            return
        known.status.wait_for_idle(timeout_seconds)
        self._mark_turns(agent_id, "cancelling", session_turns.cancelled)
        queued, owes = self._read(
            lambda tx: (bool(tx.queue.messages(agent_id)), tx.facts.read_owed(agent_id) is not None)
        )
        if queued or owes:
            self.wake(agent_id)
            if not queued:  # the wake only settles: return once it has (``wait``)
                known.status.wait_for_idle(timeout_seconds)

    def _mark_turns(
        self, agent_id: str, status: str, move: Callable[[Transaction, str], T]
    ) -> T | None:
        """Move the agent's turns in ``status`` with ``move``, in a transaction of its own —
        only if there is one (an abort without a turn commits nothing), and not from inside
        a transaction (a hook's: its turn then ends with the run's settlement). Returns what
        ``move`` returned, or None if it did not run."""
        handle = self._store.handle
        if handle.in_transaction:
            return None
        if any(t.status == status for t in self._read(lambda tx: tx.turns.started(agent_id))):
            return handle.transact(lambda tx: move(tx, agent_id))
        return None

    def compact(
        self, agent_id: str, *, wait: bool = False, timeout_seconds: float | None = None
    ) -> None:
        """Ask the agent to compact its context (after its current step); with ``wait``,
        block until that compaction's outcome (callers asking meanwhile share it).

        Raises:
            UnknownAgentError: the agent was never created.
            AgentClosedError: the system is closing or closed.
            AwaitFromOwnLoopError: ``wait`` from inside the agent's own loop, or from inside
                another agent's loop while this agent runs a tool (that tool may be waiting
                for the caller: two agents would wait for each other).
            CompactionFailedError: (with ``wait``) the compaction failed or was not confirmed.
            TimeoutError: (with ``wait``) no outcome within ``timeout_seconds``.
        """
        self._refuse_own_wait(agent_id, wait)
        if wait:
            self._refuse_tool_to_tool_compact(agent_id)
        with self._admission.operation(), self._admission.agent_operation(agent_id):
            future = self._agents.get_or_make(agent_id).status.add_compaction_waiter()
            self._agents.tell(agent_id, CompactRequested(), counted=True)
        if wait:
            future.result(timeout_seconds)

    def wait_for_idle(self, agent_id: str, *, timeout_seconds: float | None = None) -> bool:
        """Block until the agent has nothing running; False on timeout.

        Raises:
            UnknownAgentError: the agent was never created.
        """
        self._refuse_own_wait(agent_id, True)
        known = self._agents.known(agent_id)
        if known is None:
            self._require(agent_id)
            return True  # no actor: nothing runs
        return known.status.wait_for_idle(timeout_seconds)

    def wake(self, agent_id: str) -> None:
        """Let the agent continue what its durable state owes (queued messages first), as
        accepting a message would; unlike ``start(agent_id)`` it does not answer again a
        question an abort left unanswered in this process."""
        self._agents.tell(agent_id, Start(), counted=True)

    def _refuse_own_wait(self, agent_id: str, wait: bool) -> None:
        if wait and current_loop_agent() == agent_id:
            raise AwaitFromOwnLoopError(
                f'Waiting for agent "{agent_id}" from inside its own loop would wait for itself.'
            )

    def _refuse_tool_to_tool_compact(self, agent_id: str) -> None:
        """A waited compact asked from inside one agent's loop of an agent running a tool is
        refused outright: the compaction waits for that tool, which may be waiting for the
        caller (seed: the one cross-agent wait that cannot be allowed)."""
        caller = current_loop_agent()
        if caller is None or caller == agent_id:
            return
        known = self._agents.known(agent_id)
        if known is not None and known.status.tool_running:
            raise AwaitFromOwnLoopError(
                f'Waiting from inside agent "{caller}"\'s loop for a compaction of agent '
                f'"{agent_id}", which is running a tool, could deadlock: that tool may be '
                f'waiting for agent "{caller}". Ask without wait=True.'
            )
