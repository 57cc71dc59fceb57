"""The agent tier: the live agent actors of one system, under the agents supervisor
(``one_for_one``).

An agent that owes nothing has no actor (after ``idle_grace_seconds``): resolving, reading or
relabelling it never starts one; accepted work does. The tier is the only place actors
are started or stopped, so "one live actor per agent" holds by construction.

Supervision: an agent actor that crashes is restarted by the supervisor (with backoff, at
most ``intensity`` times per period) and resumes from the store through the same path as a
process restart — the durable state is the source of truth, so a restart is always correct.
Passivation is a normal (transient) exit, never a restart. Past the intensity, the agents
supervisor gives up and escalates to the system supervisor, which restarts the whole agent
tier (:meth:`AgentTier.start_tier`), as it does after a store writer failure
(``rest_for_one``): every agent that owes work resumes from the store.

Events for an agent whose actor is being restarted (or whose whole tier is) are *held*
(:class:`~agentkeep.actors.held_events.HeldEvents`), and the restart hands them to the new
incarnation: a caller whose work was durably accepted is never told an error because a
restart happened to be in progress.

The tier's jobs, one owner each:

- the actors' lifecycle — start, stop, look up, passivate: :class:`AgentTier`;
- the known agents and the idle accounting across them:
  :class:`~agentkeep.actors.directory.AgentDirectory` (each agent's own counts:
  :class:`~agentkeep.actors.status.AgentStatus`);
- the events held for restarting agents: :class:`~agentkeep.actors.held_events.HeldEvents`;
- the idle-grace timers: :class:`~agentkeep.actors.passivation.PassivationTimers`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any

import pykka

from agentkeep.actors.directory import AgentDirectory, KnownAgent, MakeAgent
from agentkeep.actors.held_events import HeldEvents
from agentkeep.actors.passivation import PassivationTimers
from agentkeep.actors.supervisor import (
    Backoff,
    ChildSpec,
    DuplicateChildError,
    RestartIntensity,
    SupervisorRef,
    SupervisorStoppedError,
    start_supervisor,
)
from agentkeep.logs import get_logger
from agentkeep.loop.events import Start

log = get_logger(__name__)

_STOP_TIMEOUT_SECONDS = 10


class AgentTier:
    """Starts, stops, looks up and passivates the agent actors of one system.

    Locking: one lock, ``_lock`` (re-entrant, with the condition ``_changed``). It guards
    ``_actors`` (the live actor of each agent), ``_passivating`` and ``_stopping``, and it
    serializes every start, hand-over and stop of an actor, so two tellers cannot start two
    actors for one agent or hand an agent's held events over out of order. Lock order: this
    lock first, then any of the parts' own locks (``AgentDirectory``, ``HeldEvents``,
    ``PassivationTimers``, an ``AgentStatus``), each a leaf that is never held while calling
    out. While holding ``_lock`` the tier itself does call out, in three ways, each safe
    because the callee never takes ``_lock``: it asks the agents supervisor to start an actor
    (``SupervisorRef.start_child``, a blocking ask: the restart path, :meth:`_spec`, runs in
    the supervisor's thread and writes ``_actors`` without the lock for that reason), it
    tells an actor (a non-blocking enqueue), and it makes an agent's entry (a snapshot read
    of the store, which never waits on the writer). It never holds ``_lock`` while waiting
    for an agent to become idle or for an actor to stop.
    ``_supervisor`` is swapped by :meth:`start_tier` in the system supervisor's thread
    without the lock: a caller holding it may be asking the old agents supervisor.

    Args:
        make_agent: Makes an agent's entry on first use (reads its row; raises
            ``UnknownAgentError`` for a stranger).
        idle_grace_seconds: How long an agent whose run settled keeps its actor.
        intensity: The agents supervisor's restart intensity.
        backoff: The agents supervisor's restart backoff.
        owed: The agents that owe work (a snapshot read), for a tier restart to resume.
    """

    def __init__(
        self,
        make_agent: MakeAgent,
        *,
        idle_grace_seconds: float,
        intensity: RestartIntensity,
        backoff: Backoff,
        owed: Callable[[], list[str]],
    ) -> None:
        self._intensity = intensity
        self._backoff = backoff
        self._owed = owed
        self._directory = AgentDirectory(make_agent, on_stopped=self._run_stopped)
        self._held = HeldEvents()
        self._timers = PassivationTimers(idle_grace_seconds, self._passivate)
        self._supervisor: SupervisorRef | None = None
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._actors: dict[str, pykka.ActorRef[Any]] = {}
        # Agents whose passivated actor is still stopping (it stops its children first).
        self._passivating: set[str] = set()
        self._stopping = False

    # -- the tier --------------------------------------------------------------------------

    def start_tier(self) -> pykka.ActorRef[Any]:
        """Start the agents supervisor: the system supervisor's ``agents`` child ``start``.

        Called again when the system supervisor restarts the tier (a store writer failure, or
        the agents supervisor gave up): the old actors are gone by then, so the new tier
        resumes every agent that owes work, plus any held events, from a background thread
        (this one is the system supervisor's, which must not wait on the agents it starts).
        Raises nothing of its own: the agents supervisor starts with no children, and a
        failed snapshot of the owed agents is logged (the next open resumes them).
        """
        restarted = self._supervisor is not None
        owed: set[str] = set()
        precounted: set[str] = set()
        if restarted:
            try:
                owed = set(self._owed())  # a snapshot read: never waits on the writer
            except Exception as error:  # the store went away: the next open resumes them
                log.warning("agent_tier_resume_failed", error=repr(error))
            # The old actors are gone. An owed agent's waiters keep waiting for its Start
            # (counted now, so none sees a false idle); the others are idle.
            precounted = self._directory.start_over_all(owed)
        supervisor = start_supervisor(
            "agents", strategy="one_for_one", intensity=self._intensity, backoff=self._backoff
        )
        self._supervisor = supervisor
        if restarted:
            threading.Thread(
                target=self._resume_tier,
                args=(owed, precounted),
                name="agentkeep-resume-agents",
                daemon=True,
            ).start()
            log.warning("agent_tier_restarted", owed=len(owed))
        return supervisor.actor_ref

    def writer_failed(self) -> None:
        """The store writer failed; the system supervisor will restart the tier after it.
        Until then every agent counts as busy, so ``wait_for_idle`` cannot return in the
        middle of the recovery. (Called in the writer's thread: no tier lock.)"""
        self._directory.hold_all_for_restart()

    def _resume_tier(self, owed: set[str], precounted: set[str]) -> None:
        with self._lock:
            # Forget the old tier's dead actors (a teller may already have started a new
            # one, which is alive and stays); an owed agent stays known (its waiters).
            for agent_id, ref in list(self._actors.items()):
                if not ref.is_alive():
                    self._actors.pop(agent_id)
                    self._timers.cancel(agent_id)
                    if agent_id not in owed:
                        self._directory.forget(agent_id)
            self._changed.notify_all()
        agent_ids = owed | self._held.agent_ids()
        for agent_id in sorted(agent_ids):
            if self._stopping:
                return
            try:
                self.tell(agent_id, Start(), counted=agent_id not in precounted)
            except Exception as error:  # deleted meanwhile, or the system is stopping
                log.debug("agent_resume_skipped", agent_id=agent_id, error=repr(error))
                known = self.known(agent_id)
                if agent_id in precounted and known is not None:
                    known.status.signal_taken()  # no Start is coming: release waiters

    # -- known agents (independent of whether an actor runs) -------------------------------

    def get_or_make(self, agent_id: str) -> KnownAgent:
        """The agent's entry (its status and hook contexts), made on first use.

        Raises:
            UnknownAgentError: the agent was never created (or has been deleted).
        """
        return self._directory.get_or_make(agent_id)

    def known(self, agent_id: str) -> KnownAgent | None:
        """The entry of an agent that has (or had, until passivated) an actor, or None."""
        return self._directory.known(agent_id)

    # -- telling ---------------------------------------------------------------------------

    def tell(self, agent_id: str, event: Any, *, counted: bool) -> None:
        """Hand ``event`` to the agent's actor, starting one if it has none. ``counted``
        events keep ``wait_for_idle`` waiting until the actor has taken them on. While the
        actor (or the tier) is restarting, the event is held for the new incarnation; once
        the system stops, it is dropped (durable work resumes at the next open).

        Raises:
            UnknownAgentError: the agent was never created (or has been deleted).
        """
        known = self._directory.get_or_make(agent_id)  # outside the lock: it may read the store
        with self._lock:
            self._timers.cancel(agent_id)
            if self._directory.known(agent_id) is not known:
                # The idle-grace timer passivated the agent between the lookup and the lock
                # and the directory dropped that entry: the actor started now must count in
                # the entry wait_for_idle consults, so make it again (under the lock, as
                # _terminate does; the directory's lock comes after ours).
                known = self._directory.get_or_make(agent_id)
            self._held.hold(agent_id, event, counted=counted)
            self._hand_over(agent_id, known)

    def _hand_over(self, agent_id: str, known: KnownAgent) -> None:
        """Give the held events to the live actor, starting one if the agent has none. If a
        restart is pending they stay held: the restart hands them over (see _spec)."""
        ref = self._live_actor(agent_id, known)
        if ref is None:
            return
        events = self._held.take(agent_id)
        for index, (event, counted) in enumerate(events):
            if counted:
                known.status.signal_sent()
            try:
                ref.tell(event)
            except pykka.ActorDeadError:
                # It crashed just now: its restart (or the tier's) hands these over.
                self._held.put_back(agent_id, events[index:])
                return

    def _live_actor(self, agent_id: str, known: KnownAgent) -> pykka.ActorRef[Any] | None:
        """The agent's running actor, started now if it has none; None while it restarts or
        once the system stops (durable work the event announced resumes at the next open)."""
        if self._stopping:
            return None
        for _attempt in range(2):
            ref = self._actors.get(agent_id)
            if ref is not None and ref.is_alive():
                return ref
            supervisor = self._supervisor
            if supervisor is None:
                return None  # the tier has not started yet: its start hands them over
            try:
                ref = supervisor.start_child(self._spec(agent_id, known))
            except DuplicateChildError:
                # Restarting (its restart hands over), or just restarted: look again.
                continue
            except SupervisorStoppedError:
                if self._supervisor is supervisor:
                    # The tier is restarting (its resume hands them over), or the system is
                    # stopping (durable work resumes at the next open).
                    return None
                continue  # a new tier is up: start the actor there
            self._actors[agent_id] = ref
            return ref
        return None

    def _spec(self, agent_id: str, known: KnownAgent) -> ChildSpec:
        incarnations = 0

        def start() -> pykka.ActorRef[Any]:
            # Runs in the supervisor's thread: on the first start and on every restart.
            nonlocal incarnations
            incarnations += 1
            ref = known.start_actor()
            if incarnations > 1:
                # A restart rebuilds from the store and resumes what it owes, exactly as a
                # process restart would. (A plain dict store: taking the tier lock here
                # could wait on a caller that waits on this supervisor.)
                self._actors[agent_id] = ref
                known.status.start_over(pending=1)  # the Start below
                ref.tell(Start())
                self._release_held(agent_id, known, ref)
                log.warning("agent_restarted", agent_id=agent_id, incarnation=incarnations)
            return ref

        # transient: passivation (a normal stop) is not restarted; a crash is. No shutdown
        # timeout: a new incarnation must never run beside an old one still stopping.
        return ChildSpec(
            id=agent_id, start=start, restart="transient", shutdown_timeout_seconds=None
        )

    def _release_held(self, agent_id: str, known: KnownAgent, ref: pykka.ActorRef[Any]) -> None:
        """A restart hands over the events held while it was pending (without the tier
        lock: see _spec). A teller that held one after this sees the new actor itself."""
        for event, counted in self._held.take(agent_id):
            if counted:
                known.status.signal_sent()
            with suppress(pykka.ActorDeadError):
                ref.tell(event)

    def tell_if_live(self, agent_id: str, event: Any) -> bool:
        """Hand ``event`` to a live actor only (an agent without one has nothing to abort).
        Returns whether it was handed over."""
        with self._lock:
            ref = self._actors.get(agent_id)
            if ref is None or not ref.is_alive():
                return False
            ref.tell(event)
            return True

    def live(self) -> list[str]:
        """The ids of the agents that have an actor now, sorted."""
        with self._lock:
            return sorted(self._actors)

    def tell_all(self, event: Any) -> None:
        """Hand ``event`` to every live actor (one that dies meanwhile is skipped)."""
        with self._lock:
            refs = list(self._actors.values())
        for ref in refs:
            with suppress(pykka.ActorDeadError):
                ref.tell(event)

    # -- stopping --------------------------------------------------------------------------

    def remove(self, agent_id: str, *, timeout_seconds: float | None) -> None:
        """Let the agent's admitted work finish (up to the timeout), then stop its actor and
        forget it (its held events are dropped). Called by ``delete``."""
        known = self.known(agent_id)
        if known is not None:
            known.status.wait_for_idle(timeout_seconds)
        with self._lock:
            self._timers.cancel(agent_id)
            live = self._actors.pop(agent_id, None) is not None
            self._directory.forget(agent_id)
            self._changed.notify_all()
        if live:
            self._terminate(agent_id, hand_over_held=False)

    def stop_all(self) -> None:
        """Admit no more events and forget the actors; the system supervisor stops them (in
        reverse start order, each closing its own model session once). Every waiter is released
        and every pending compaction fails."""
        with self._lock:
            self._stopping = True
            self._actors.clear()
            self._timers.cancel_all()
            self._changed.notify_all()
        self._held.clear()
        self._directory.close_all()

    def _terminate(self, agent_id: str, *, hand_over_held: bool = True) -> None:
        supervisor = self._supervisor
        try:
            if supervisor is not None:
                supervisor.terminate_child(agent_id, timeout_seconds=_STOP_TIMEOUT_SECONDS)
        except Exception as error:  # already gone (crashed and given up, or stopped)
            log.debug("agent_terminate_skipped", agent_id=agent_id, error=repr(error))
        # An event told while it was stopping found it still registered and was held: a
        # passivated agent starts again for it; a removed (deleted) agent drops it.
        with self._lock:
            if not hand_over_held:
                self._held.drop(agent_id)
            elif self._held.waiting(agent_id) and not self._stopping:
                self._hand_over(agent_id, self._directory.get_or_make(agent_id))

    # -- passivation -----------------------------------------------------------------------

    def _run_stopped(self, agent_id: str, settled: bool) -> None:
        """An actor's run stopped (told in its thread). If it settled, passivate it after the
        grace period; an agent that still owes work keeps its actor."""
        if not settled:
            return
        with self._lock:
            if self._stopping or agent_id not in self._actors:
                return
            self._timers.schedule(agent_id)

    def _passivate(self, agent_id: str) -> None:
        """A passivation timer fired (in its own thread): stop the agent's actor unless work
        arrived meanwhile."""
        with self._lock:
            self._timers.forget(agent_id)
            known = self._directory.known(agent_id)
            if self._stopping or known is None or not known.status.idle:
                return  # work arrived meanwhile: the actor stays
            claim = known.status.claim
            if claim is not None and not claim.retire():
                return  # an acceptance is consuming for it (actors.consume_claim)
            live = self._actors.pop(agent_id, None) is not None
            self._directory.forget(agent_id)
            if live:
                self._passivating.add(agent_id)
            self._changed.notify_all()
        if live:
            try:
                self._terminate(agent_id)  # a normal exit: its model session closes in on_stop
            finally:
                with self._lock:
                    self._passivating.discard(agent_id)
                    self._changed.notify_all()
            log.debug("agent_passivated", agent_id=agent_id)

    def wait_for_passivation(self, agent_id: str, timeout_seconds: float | None) -> bool:
        """Block until the agent has no actor, and the last one has stopped (its children
        with it); False on timeout."""

        def passivated() -> bool:
            return agent_id not in self._actors and agent_id not in self._passivating

        with self._lock:
            return self._changed.wait_for(passivated, timeout_seconds)
