"""The live agent actors of one system: started when work reaches an agent, passivated when
it owes nothing.

An agent that owes nothing has no actor (after ``idle_grace_seconds``): resolving, reading or
relabelling it never starts one; accepted work does. The registry is the only place actors
are started or stopped, so "one live actor per agent" holds by construction.
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

log = structlog.get_logger(__name__)

_STOP_TIMEOUT_SECONDS = 10


class AgentRegistry:
    def __init__(
        self, make_services: Callable[[str], AgentServices], *, idle_grace_seconds: float
    ) -> None:
        self._make_services = make_services
        self._idle_grace_seconds = idle_grace_seconds
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
                ref = AgentActor.start(services)
                self._actors[agent_id] = ref
            if counted:
                services.status.signal_sent()
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
            ref = self._actors.pop(agent_id, None)
            self._services.pop(agent_id, None)
            self._changed.notify_all()
        if ref is not None:
            _stop(ref, block=True)

    def stop_all(self) -> None:
        """Stop every actor (each closes its own provider session once)."""
        with self._lock:
            self._stopping = True
            refs = list(self._actors.values())
            self._actors.clear()
            for timer in self._timers.values():
                timer.cancel()
            self._timers.clear()
            self._changed.notify_all()
        for ref in refs:
            _stop(ref, block=True)

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
            ref = self._actors.pop(agent_id, None)
            self._services.pop(agent_id, None)
            self._changed.notify_all()
        if ref is not None:
            _stop(ref, block=False)  # its session closes in on_stop; the store keeps the rest
            log.debug("agent_passivated", agent_id=agent_id)

    def wait_for_passivation(self, agent_id: str, timeout_seconds: float | None) -> bool:
        with self._lock:
            return self._changed.wait_for(lambda: agent_id not in self._actors, timeout_seconds)


def _stop(ref: pykka.ActorRef[Any], *, block: bool) -> None:
    with suppress(pykka.ActorDeadError):
        try:
            ref.stop(block=block, timeout=_STOP_TIMEOUT_SECONDS if block else None)
        except pykka.Timeout:
            log.warning("agent_stop_timed_out")
