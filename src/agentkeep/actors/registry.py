"""The live agent actors of one system, under the agent supervisor (``one_for_one``).

An agent that owes nothing has no actor (after ``idle_grace_seconds``): resolving, reading or
relabelling it never starts one; accepted work does. The registry is the only place actors
are started or stopped, so "one live actor per agent" holds by construction.

Supervision: an agent actor that crashes is restarted by the supervisor (with backoff, at
most ``intensity`` times per period) and resumes from the store through the same path as a
process restart — the durable state is the source of truth, so a restart is always correct.
Passivation is a normal (transient) exit, never a restart. Past the intensity, the
supervisor gives up and ``on_give_up`` is told (the system then stops cleanly).
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
    RestartIntensity,
    SupervisorGaveUpError,
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
        on_give_up: Callable[[SupervisorGaveUpError], None],
    ) -> None:
        self._make_services = make_services
        self._idle_grace_seconds = idle_grace_seconds
        self._supervisor = start_supervisor(
            "agents",
            strategy="one_for_one",
            intensity=intensity,
            backoff=backoff,
            on_give_up=on_give_up,
        )
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._actors: dict[str, pykka.ActorRef[Any]] = {}
        self._services: dict[str, AgentServices] = {}
        self._timers: dict[str, threading.Timer] = {}
        self._stopping = False

    # -- services (per agent, independent of whether an actor runs) ------------------------

    def services(self, agent_id: str) -> AgentServices:
        """The services of ``agent_id``, made on first use (raises for an unknown agent)."""
        with self._lock:
            services = self._services.get(agent_id)
            if services is None:
                services = self._make_services(agent_id)
                services.on_stopped = self._run_stopped
                self._services[agent_id] = services
            return services

    def known(self, agent_id: str) -> AgentServices | None:
        """The services of an agent that has (or had, until passivated) an actor."""
        with self._lock:
            return self._services.get(agent_id)

    # -- telling ---------------------------------------------------------------------------

    def tell(self, agent_id: str, event: Any, *, counted: bool) -> None:
        """Hand ``event`` to the agent's actor, starting one if it has none. ``counted``
        events keep ``wait_for_idle`` waiting until the actor has taken them on."""
        services = self.services(agent_id)
        with self._lock:
            self._cancel_timer(agent_id)
            ref = self._actors.get(agent_id)
            if ref is None or not ref.is_alive():
                ref = self._supervisor.start_child(self._spec(agent_id, services))
                self._actors[agent_id] = ref
            if counted:
                services.status.signal_sent()
            ref.tell(event)

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
                services.status.reset_after_crash()
                services.status.signal_sent()
                ref.tell(Start())
                log.warning("agent_restarted", agent_id=agent_id, incarnation=incarnations)
            return ref

        # transient: passivation (a normal stop) is not restarted; a crash is. No shutdown
        # timeout: a new incarnation must never run beside an old one still stopping.
        return ChildSpec(
            id=agent_id, start=start, restart="transient", shutdown_timeout_seconds=None
        )

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
            self._terminate(agent_id)

    def stop_all(self) -> None:
        """Stop every actor, in reverse start order (each closes its own session once)."""
        with self._lock:
            self._stopping = True
            self._actors.clear()
            for timer in self._timers.values():
                timer.cancel()
            self._timers.clear()
            self._changed.notify_all()
        try:
            self._supervisor.stop(timeout_seconds=_STOP_TIMEOUT_SECONDS * 3)
        except Exception as error:  # it gave up (and stopped) already
            log.debug("agent_supervisor_already_stopped", error=repr(error))

    def _terminate(self, agent_id: str) -> None:
        try:
            self._supervisor.terminate_child(agent_id, timeout_seconds=_STOP_TIMEOUT_SECONDS)
        except Exception as error:  # already gone (crashed and given up, or stopped)
            log.debug("agent_terminate_skipped", agent_id=agent_id, error=repr(error))

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
            self._changed.notify_all()
        if live:
            self._terminate(agent_id)  # a normal exit: its session closes in on_stop
            log.debug("agent_passivated", agent_id=agent_id)

    def wait_for_passivation(self, agent_id: str, timeout_seconds: float | None) -> bool:
        with self._lock:
            return self._changed.wait_for(lambda: agent_id not in self._actors, timeout_seconds)
