"""One simulated process of a chaos campaign: what it offers, what it saw, and its report.

:class:`ProcessHandle` is what a campaign's driver may do inside a process (offer messages,
abort, request a compaction); :class:`ProcessReport` is what the process did. Durable state is
read as a :class:`DurableState` snapshot (:func:`read_durable`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import msgspec

from agentkeep.agent_system import AgentSystem
from agentkeep.chaos.tools import EFFECT_KEY
from agentkeep.features import Feature, HookContext
from agentkeep.messages import user
from agentkeep.persistence.faults import FaultPlan
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.kv_keys import scope_prefix
from agentkeep.runtime.kv_areas import CALL_AREA
from agentkeep.types import Done, PermissionMode, Settings, StreamEvent, TextBlock, TextEnd
from agentkeep.types.records import (
    ArchivedEpoch,
    BlockRecord,
    CompactionRecord,
    ConversationRecord,
    OwedWork,
    PendingToolCall,
    QueuedMessage,
    QueuedNotice,
    QueueName,
    UserRecord,
)
from agentkeep.types.turns import TurnRecord

if TYPE_CHECKING:
    from agentkeep import Agent


class Offer(msgspec.Struct, frozen=True, kw_only=True):
    """A message the campaign wants delivered (its fixed ``id`` makes re-offers idempotent)."""

    id: str
    text: str
    queue: QueueName = "send"
    provider: str | None = None
    model: str | None = None
    profile: str | None = None  # the profile the message selects (None: the null one)
    permission_mode: PermissionMode | None = None  # from this message on, once consumed


class DurableState(msgspec.Struct, frozen=True, kw_only=True):
    """Everything durable about one agent, read in one snapshot."""

    records: tuple[ConversationRecord, ...]
    queued: tuple[QueuedMessage, ...]
    notices: tuple[QueuedNotice, ...]
    pending: tuple[PendingToolCall, ...]
    owed: OwedWork | None
    settings: Settings | None
    # What a switch or a compaction took out of the provider's view (never deleted).
    archived: tuple[ArchivedEpoch, ...] = ()
    # The session's turns, in number order (docs/turns.md).
    turns: tuple[TurnRecord, ...] = ()
    # Internal ids of pending calls whose call store holds the transactional chaos tool's
    # write (``chaos.tools.EFFECT_KEY``), each with whether its result is claimed (X1).
    call_effects: tuple[tuple[str, bool], ...] = ()
    # Messages a cancel took back with the turn they joined (a steer still waiting when its
    # running turn was cancelled or aborted: docs/turns.md): accepted, never consumed, and
    # no longer queued — by design, not lost.
    taken_back: tuple[str, ...] = ()


def read_durable(tx: Transaction, agent_id: str) -> DurableState:
    """Everything durable about ``agent_id`` in one snapshot: archived epochs, records, queue,
    notices, pending calls, owed work, settings and turns.
    """
    return DurableState(
        archived=tuple(tx.archive.epochs(agent_id)),
        records=tuple(tx.records.load(agent_id)),
        queued=tuple(tx.queue.messages(agent_id)),
        notices=tuple(tx.queue.notices(agent_id)),
        pending=tuple(tx.calls.pending(agent_id)),
        owed=tx.facts.read_owed(agent_id),
        settings=tx.facts.read_settings(agent_id),
        turns=tuple(_turns(tx, agent_id)),
        call_effects=tuple(_call_effects(tx, agent_id)),
        taken_back=tuple(_taken_back(tx, agent_id)),
    )


def _taken_back(tx: Transaction, agent_id: str) -> list[str]:
    """The inputs of the session's cancelled turns that never entered the conversation and
    wait in no queue."""
    inputs = [
        message_id
        for turn in _turns(tx, agent_id)
        if turn.status == "cancelled"
        for message_id in tx.turns.message_ids(agent_id, turn.id)
    ]
    if not inputs:
        return []
    present = {q.id for q in tx.queue.messages(agent_id)}
    present |= {r.message_id for r in tx.records.load(agent_id) if isinstance(r, UserRecord)}
    for epoch in tx.archive.epochs(agent_id):
        present |= {r.message_id for r in epoch.records if isinstance(r, UserRecord)}
    return [m for m in inputs if m not in present]


def _call_effects(tx: Transaction, agent_id: str) -> list[tuple[str, bool]]:
    found = []
    for call in tx.calls.pending(agent_id):
        key = scope_prefix("agent", agent_id, CALL_AREA, call.internal_id) + EFFECT_KEY
        if tx.kv.read(key) is not None:
            found.append((call.internal_id, call.committed is not None))
    return found


def _turns(tx: Transaction, agent_id: str) -> list[TurnRecord]:
    turns: list[TurnRecord] = []
    while batch := tx.turns.page(agent_id, turns[-1].number if turns else 0, 1000):
        turns += batch
    return turns


def archived_users(state: DurableState) -> set[str]:
    """Ids of the user messages in the archived epochs."""
    return {
        r.message_id for epoch in state.archived for r in epoch.records if isinstance(r, UserRecord)
    }


def history_log(state: DurableState) -> list[ConversationRecord]:
    """Every record ever durable, archived epochs first, without compaction records.

    A switch archives the whole conversation and a compaction the records its summary
    replaces, so as long as nothing is physically deleted this log only grows at its end.
    """
    records = [r for epoch in state.archived for r in epoch.records]
    records += state.records
    return [r for r in records if not isinstance(r, CompactionRecord)]


@dataclass
class ProcessReport:
    """What one simulated process did (for the checker and for failure messages)."""

    generation: int
    faults: FaultPlan | None
    crashed: bool = False
    idle: bool = True
    accepted: list[str] = field(default_factory=list)
    failed_offers: list[str] = field(default_factory=list)
    events: int = 0
    aborted: bool = False
    compaction_requested: bool = False
    # Store operations the process's writer counted (the fault points' clock): with a fault
    # plan, ``operations >= faults.at`` means its fault fired (see ``fault_fired``).
    operations: int = 0
    # (invariant, detail) pairs observed while the process ran (e.g. a response reported
    # finished whose answer was not durable, a request that ended with the model's message).
    live_violations: list[tuple[int | str, str]] = field(default_factory=list)

    @property
    def fault_fired(self) -> bool:
        """True when the process had a fault plan and its store reached the planned operation
        (the fault fired); False when the process finished its work first."""
        return self.faults is not None and self.operations >= self.faults.at

    def describe(self) -> str:
        """One line for failure messages: the process's fault plan and what it did."""
        plan = "healthy" if self.faults is None else f"{self.faults.mode}@{self.faults.at}"
        return (
            f"process {self.generation} ({plan}): crashed={self.crashed} idle={self.idle} "
            f"accepted={self.accepted} failed={self.failed_offers} events={self.events} "
            f"aborted={self.aborted} compaction={self.compaction_requested}"
        )


class ProcessWorld(Protocol):
    """What a process reads and marks of its campaign's world (a
    :class:`~agentkeep.chaos.world.ChaosWorld`, which runs the processes)."""

    agent_id: str
    offers: list[Offer]
    accept_order: list[str]
    _live: Live | None

    def alive(self, generation: int) -> bool:
        """Whether process ``generation`` is still alive (not closed, store not crashed)."""
        ...

    def _mark_accepted(self, offer_id: str, report: ProcessReport) -> None: ...


def live_check(world: ProcessWorld, generation: int) -> Callable[[], bool]:
    """The liveness test guarded tools of process ``generation`` ask: whether that process is still
    the world's live one (a tool started during ``open`` first waits for it to return).
    """

    def alive() -> bool:
        live = world._live
        if live is not None and live.generation == generation:
            live.opened.wait(30.0)  # a tool started by ``open`` waits until open returned
        return world.alive(generation)

    return alive


class Live:
    """The running process: its system, its fault plan, its event counter."""

    def __init__(
        self,
        world: ProcessWorld,
        report: ProcessReport,
        faults: FaultPlan | None,
        abort_after_events: int | None,
    ) -> None:
        self.world = world
        self.report = report
        self.generation = report.generation
        self.faults = faults
        self.abort_after = abort_after_events
        self.opened = threading.Event()
        self.system: AgentSystem | None = None
        self.last_text: str | None = None
        self._abort_pending = False
        self._lock = threading.Lock()

    def note_abort(self) -> None:
        """The process aborts its agent's turn (a driver's abort): noted in the report."""
        with self._lock:
            self.report.aborted = True

    def attach(self, system: AgentSystem) -> None:
        """Note the process's system once ``open`` returned (an abort asked for meanwhile is sent
        now).
        """
        with self._lock:
            self.system = system
            abort_now = self._abort_pending
        self.opened.set()
        if abort_now:
            system.abort(self.world.agent_id)

    def attach_failed(self) -> None:
        """Note that ``open`` failed, releasing tools waiting for it."""
        self.opened.set()

    def crashed(self) -> bool:
        """True once this process's store has reached its crash point (a ``crash`` fault plan); the
        process is dead from then on.
        """
        plan = self.faults
        system = self.system
        if plan is None or plan.mode != "crash" or system is None:
            return False
        try:
            return system.internals.store.statistics().operations >= plan.at
        except Exception:
            return True

    def on_event(self, event: StreamEvent) -> None:
        """Count one stream event; at the ``abort_after_events``-th, abort the agent's turn (or as
        soon as the system is attached).
        """
        with self._lock:
            self.report.events += 1
            count = self.report.events
            system = self.system
            fire = self.abort_after is not None and count == self.abort_after
            if fire and system is None:
                self._abort_pending = True
        if fire:
            self.report.aborted = True
            if system is not None:
                system.abort(self.world.agent_id)
        if isinstance(event, TextEnd):
            self.last_text = event.text
        elif isinstance(event, Done) and event.state == "normal":
            self._check_answer_durable(system)

    def _check_answer_durable(self, system: AgentSystem | None) -> None:
        """A response reported finished (``done normal``) has its answer on disk."""
        text = self.last_text
        if system is None or text is None or self.crashed():
            return
        try:
            records = system.internals.store.read(lambda tx: tx.records.load(self.world.agent_id))
        except Exception:
            return
        last = records[-1] if records else None
        durable = (
            isinstance(last, BlockRecord)
            and isinstance(last.block, TextBlock)
            and last.block.text == text
        )
        if not durable and not self.crashed():
            self.report.live_violations.append(
                (13, f"done(normal) reported while the answer {text!r} was not the last record")
            )


class Observer(Feature):
    """The feature that feeds every stream event of the process to its :class:`Live` (to abort after
    a seeded number of events).
    """

    name = "chaosobserver"

    def __init__(self, live: Live) -> None:
        self._live = live

    def on_event(self, ctx: HookContext, event: StreamEvent) -> None:
        self._live.on_event(event)


class ProcessHandle:
    """What a campaign's driver may do inside one process."""

    def __init__(self, world: ProcessWorld, system: AgentSystem, agent: Agent, live: Live) -> None:
        self.world = world
        self.system = system
        self.agent = agent
        self._live = live

    @property
    def report(self) -> ProcessReport:
        """What this process has done so far (filled in as it runs)."""
        return self._live.report

    def crashed(self) -> bool:
        """True once this process's store has reached its crash point (a ``crash`` fault plan); the
        process is dead from then on.
        """
        return self._live.crashed()

    def discover(self) -> None:
        """Mark offers a dead process accepted (its caller never heard) as accepted, in
        durable order: those already in the conversation, then those queued."""
        world = self.world
        unknown = {o.id for o in world.offers} - set(world.accept_order)
        if not unknown:
            return
        state = self.system.internals.store.read(lambda tx: read_durable(tx, world.agent_id))
        found = [r.message_id for r in state.records if isinstance(r, UserRecord)]
        found += [q.id for q in state.queued]
        for offer_id in found:
            if offer_id in unknown:
                world._mark_accepted(offer_id, self.report)

    def offer(self, offer: Offer) -> bool:
        """Offer one message; True if it is durably accepted (now or before)."""
        world = self.world
        if offer.id in world.accept_order:
            return True
        if self.crashed():
            return False  # a dead process sends nothing
        method = self.agent.steer if offer.queue == "steering" else self.agent.send
        try:
            method(
                user(offer.text),
                id=offer.id,
                provider=offer.provider,
                model=offer.model,
                profile=offer.profile,
                permission_mode=offer.permission_mode,
            )
        except Exception:
            self.report.failed_offers.append(offer.id)
            if not self._durably_present(offer.id):
                return False
        world._mark_accepted(offer.id, self.report)
        return True

    def offer_pending(self) -> None:
        """Offer, in order, every message not yet durably accepted."""
        for each in list(self.world.offers):
            self.offer(each)

    def request_compaction(self) -> None:
        """Ask the agent to compact (without waiting), unless the process has crashed.

        The request is noted in :attr:`report`; a failure is swallowed (a dying process fails in
        every way it can, and the checker judges the disk).
        """
        if self.crashed():
            return
        self.report.compaction_requested = True
        quietly(self.agent.compact)

    def abort(self) -> None:
        """Abort the agent's running turn (a no-op when none runs). Noted in :attr:`report`
        (as an abort after N stream events is): an aborted turn may settle with its last
        message unanswered, by design (docs/decisions.md), and the checker exempts that tail
        only for a process that aborted."""
        self._live.note_abort()
        self.system.abort(self.world.agent_id)

    def _durably_present(self, offer_id: str) -> bool:
        try:
            state = self.system.internals.store.read(
                lambda tx: read_durable(tx, self.world.agent_id)
            )
        except Exception:
            return False
        if any(q.id == offer_id for q in state.queued):
            return True
        return any(isinstance(r, UserRecord) and r.message_id == offer_id for r in state.records)


def quietly(action: Callable[[], object]) -> None:
    """Run ``action``, swallowing any exception: a dead process fails in every way it can, and the
    checker judges the disk.
    """
    try:
        action()
    except Exception:  # a dead process fails in every way it can; the checker judges the disk
        return


__all__ = [
    "DurableState",
    "Live",
    "Observer",
    "Offer",
    "ProcessHandle",
    "ProcessReport",
    "ProcessWorld",
    "archived_users",
    "history_log",
    "live_check",
    "quietly",
    "read_durable",
]
