"""The live agent actors of one system, under the agents supervisor (``one_for_one``).

An agent that owes nothing has no actor (after ``idle_grace_seconds``): resolving, reading or
relabelling it never starts one; accepted work does. The registry is the only place actors
are started or stopped, so "one live actor per agent" holds by construction.

Supervision: an agent actor that crashes is restarted by the supervisor (with backoff, at
most ``intensity`` times per period) and resumes from the store through the same path as a
process restart — the durable state is the source of truth, so a restart is always correct.
Passivation is a normal (transient) exit, never a restart. Past the intensity, the agents
supervisor gives up and escalates to the system supervisor, which restarts the whole agent
tier (:meth:`AgentRegistry.start_tier`), as it does after a store writer failure
(``rest_for_one``): every agent that owes work resumes from the store.

Events for an agent whose actor is being restarted (or whose whole tier is) are *held*, and
the restart hands them to the new incarnation: a caller whose work was durably accepted is
never told an error because a restart happened to be in progress.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any

import pykka
import structlog

from agentkeep.actors.agent_actor import AgentActor
from agentkeep.actors.services import AgentServices
from agentkeep.actors.supervisor import (
    Backoff,
    ChildSpec,
    DuplicateChildError,
    RestartIntensity,
    SupervisorRef,
    SupervisorStoppedError,
    start_supervisor,
)
from agentkeep.loop.messages import Start

log = structlog.get_logger(__name__)

_STOP_TIMEOUT_SECONDS = 10


class AgentRegistry:
    def __init__(
        self,
        make_services: Callable[[str], AgentServices],
        *,
        idle_grace_seconds: float,
        intensity: RestartIntensity,
        backoff: Backoff,
        owed: Callable[[], list[str]],
    ) -> None:
        self._make_services = make_services
        self._idle_grace_seconds = idle_grace_seconds
        self._intensity = intensity
        self._backoff = backoff
        self._owed = owed
        # Swapped by start_tier in the system supervisor's thread, which must never wait on
        # the registry lock (a caller holding it may be asking the old agents supervisor).
        self._supervisor: SupervisorRef | None = None
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._actors: dict[str, pykka.ActorRef[Any]] = {}
        self._services: dict[str, AgentServices] = {}
        self._timers: dict[str, threading.Timer] = {}
        # Agents whose passivated actor is still stopping (it stops its children first).
        self._passivating: set[str] = set()
        # Events waiting for a restart to hand them over; a leaf lock, never held while
        # calling anything else.
        self._held_lock = threading.Lock()
        self._held: dict[str, list[tuple[Any, bool]]] = {}
        self._stopping = False
        # Between a store writer failure and the agent tier's restart (see writer_failed).
        self._restarting = False

    # -- the tier --------------------------------------------------------------------------

    def start_tier(self) -> pykka.ActorRef[Any]:
        """Start the agents supervisor: the system supervisor's ``agents`` child ``start``.

        Called again when the system supervisor restarts the tier (a store writer failure, or
        the agents supervisor gave up): the old actors are gone by then, so the new tier
        resumes every agent that owes work, plus any held events, from a background thread
        (this one is the system supervisor's, which must not wait on the agents it starts).
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
            self._restarting = False
            for agent_id, services in list(self._services.items()):
                services.status.start_over(pending=int(agent_id in owed))
                if agent_id in owed:
                    precounted.add(agent_id)
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
        middle of the recovery. (Called in the writer's thread: no registry lock.)"""
        self._restarting = True  # services made from now on start held as well
        for services in list(self._services.values()):
            services.status.hold_for_restart()

    def _resume_tier(self, owed: set[str], precounted: set[str]) -> None:
        with self._lock:
            # Forget the old tier's dead actors (a teller may already have started a new
            # one, which is alive and stays); an owed agent keeps its services (its waiters).
            for agent_id, ref in list(self._actors.items()):
                if not ref.is_alive():
                    self._actors.pop(agent_id)
                    self._cancel_timer(agent_id)
                    if agent_id not in owed:
                        self._services.pop(agent_id, None)
            self._changed.notify_all()
        with self._held_lock:
            agent_ids = owed | set(self._held)
        for agent_id in sorted(agent_ids):
            if self._stopping:
                return
            try:
                self.tell(agent_id, Start(), counted=agent_id not in precounted)
            except Exception as error:  # deleted meanwhile, or the system is stopping
                log.debug("agent_resume_skipped", agent_id=agent_id, error=repr(error))
                services = self.known(agent_id)
                if agent_id in precounted and services is not None:
                    services.status.signal_taken()  # no Start is coming: release waiters

    # -- services (per agent, independent of whether an actor runs) ------------------------

    def services(self, agent_id: str) -> AgentServices:
        """The services of ``agent_id``, made on first use (raises for an unknown agent)."""
        with self._lock:
            services = self._services.get(agent_id)
            if services is None:
                services = self._make_services(agent_id)
                services.on_stopped = self._run_stopped
                if self._restarting:
                    services.status.hold_for_restart()
                self._services[agent_id] = services
            return services

    def known(self, agent_id: str) -> AgentServices | None:
        """The services of an agent that has (or had, until passivated) an actor."""
        with self._lock:
            return self._services.get(agent_id)

    # -- telling ---------------------------------------------------------------------------

    def tell(self, agent_id: str, event: Any, *, counted: bool) -> None:
        """Hand ``event`` to the agent's actor, starting one if it has none. ``counted``
        events keep ``wait_for_idle`` waiting until the actor has taken them on. While the
        actor (or the tier) is restarting, the event is held for the new incarnation."""
        services = self.services(agent_id)
        with self._lock:
            self._cancel_timer(agent_id)
            self._hold(agent_id, event, counted)
            self._hand_over(agent_id, services)

    def _hold(self, agent_id: str, event: Any, counted: bool) -> None:
        with self._held_lock:
            self._held.setdefault(agent_id, []).append((event, counted))

    def _hand_over(self, agent_id: str, services: AgentServices) -> None:
        """Give the held events to the live actor, starting one if the agent has none. If a
        restart is pending they stay held: the restart hands them over (see _spec)."""
        ref = self._live_actor(agent_id, services)
        if ref is None:
            return
        with self._held_lock:
            events = self._held.pop(agent_id, [])
        for index, (event, counted) in enumerate(events):
            if counted:
                services.status.signal_sent()
            try:
                ref.tell(event)
            except pykka.ActorDeadError:
                # It crashed just now: its restart (or the tier's) hands these over.
                with self._held_lock:
                    self._held[agent_id] = events[index:] + self._held.get(agent_id, [])
                return

    def _live_actor(self, agent_id: str, services: AgentServices) -> pykka.ActorRef[Any] | None:
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
                ref = supervisor.start_child(self._spec(agent_id, services))
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

    def _spec(self, agent_id: str, services: AgentServices) -> ChildSpec:
        incarnations = 0

        def start() -> pykka.ActorRef[Any]:
            # Runs in the supervisor's thread: on the first start and on every restart.
            nonlocal incarnations
            incarnations += 1
            ref: pykka.ActorRef[Any] = AgentActor.start(services)
            if incarnations > 1:
                # A restart rebuilds from the store and resumes what it owes, exactly as a
                # process restart would. (A plain dict store: taking the registry lock here
                # could wait on a caller that waits on this supervisor.)
                self._actors[agent_id] = ref
                services.status.start_over(pending=1)  # the Start below
                ref.tell(Start())
                self._release_held(agent_id, services, ref)
                log.warning("agent_restarted", agent_id=agent_id, incarnation=incarnations)
            return ref

        # transient: passivation (a normal stop) is not restarted; a crash is. No shutdown
        # timeout: a new incarnation must never run beside an old one still stopping.
        return ChildSpec(
            id=agent_id, start=start, restart="transient", shutdown_timeout_seconds=None
        )

    def _release_held(
        self, agent_id: str, services: AgentServices, ref: pykka.ActorRef[Any]
    ) -> None:
        """A restart hands over the events held while it was pending (without the registry
        lock: see _spec). A teller that held one after this sees the new actor itself."""
        with self._held_lock:
            events = self._held.pop(agent_id, [])
        for event, counted in events:
            if counted:
                services.status.signal_sent()
            with suppress(pykka.ActorDeadError):
                ref.tell(event)

    def tell_if_live(self, agent_id: str, event: Any) -> bool:
        """Hand ``event`` to a live actor only (an agent without one has nothing to abort)."""
        with self._lock:
            ref = self._actors.get(agent_id)
            if ref is None or not ref.is_alive():
                return False
            ref.tell(event)
            return True

    def live(self) -> list[str]:
        with self._lock:
            return sorted(self._actors)

    def tell_all(self, event: Any) -> None:
        with self._lock:
            refs = list(self._actors.values())
        for ref in refs:
            with suppress(pykka.ActorDeadError):
                ref.tell(event)

    # -- stopping --------------------------------------------------------------------------

    def remove(self, agent_id: str, *, timeout_seconds: float | None) -> None:
        """Let the agent's admitted work finish (up to the timeout), then stop its actor."""
        services = self.known(agent_id)
        if services is not None:
            services.status.wait_for_idle(timeout_seconds)
        with self._lock:
            self._cancel_timer(agent_id)
            live = self._actors.pop(agent_id, None) is not None
            self._services.pop(agent_id, None)
            self._changed.notify_all()
        if live:
            self._terminate(agent_id, hand_over_held=False)

    def stop_all(self) -> None:
        """Admit no more events and forget the actors; the system supervisor stops them (in
        reverse start order, each closing its own session once)."""
        with self._lock:
            self._stopping = True
            self._actors.clear()
            for timer in self._timers.values():
                timer.cancel()
            self._timers.clear()
            self._changed.notify_all()
            services = list(self._services.values())
        with self._held_lock:
            self._held.clear()
        for each in services:
            each.status.resolve_compactions("The agent system closed before the compaction ran.")
            each.status.start_over()  # nothing will run again: release every waiter

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
            with self._held_lock:
                waiting = agent_id in self._held
                if not hand_over_held:
                    self._held.pop(agent_id, None)
            if waiting and hand_over_held and not self._stopping:
                self._hand_over(agent_id, self.services(agent_id))

    # -- passivation -----------------------------------------------------------------------

    def _run_stopped(self, agent_id: str, settled: bool) -> None:
        """An actor's run stopped. If it settled, passivate it after the grace period; an
        agent that still owes work keeps its actor."""
        if not settled:
            return
        with self._lock:
            if self._stopping or agent_id not in self._actors:
                return
            self._cancel_timer(agent_id)
            timer = threading.Timer(self._idle_grace_seconds, self._passivate, (agent_id,))
            timer.daemon = True
            self._timers[agent_id] = timer
            timer.start()

    def _cancel_timer(self, agent_id: str) -> None:
        timer = self._timers.pop(agent_id, None)
        if timer is not None:
            timer.cancel()

    def _passivate(self, agent_id: str) -> None:
        with self._lock:
            self._timers.pop(agent_id, None)
            services = self._services.get(agent_id)
            if self._stopping or services is None or not services.status.idle:
                return  # work arrived meanwhile: the actor stays
            live = self._actors.pop(agent_id, None) is not None
            self._services.pop(agent_id, None)
            if live:
                self._passivating.add(agent_id)
            self._changed.notify_all()
        if live:
            try:
                self._terminate(agent_id)  # a normal exit: its session closes in on_stop
            finally:
                with self._lock:
                    self._passivating.discard(agent_id)
                    self._changed.notify_all()
            log.debug("agent_passivated", agent_id=agent_id)

    def wait_for_passivation(self, agent_id: str, timeout_seconds: float | None) -> bool:
        """Wait until the agent has no actor, and the last one has stopped (its children
        with it)."""

        def passivated() -> bool:
            return agent_id not in self._actors and agent_id not in self._passivating

        with self._lock:
            return self._changed.wait_for(passivated, timeout_seconds)
