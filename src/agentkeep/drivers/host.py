"""The injected drivers of one system: registration, runners, cancel, stop (a driver turn is
accepted by the system's one acceptance path: ``agentkeep.agent_system._driver_turns``).

The system's supervision tree gets a third tier (``agentkeep.actors.tree``)::

    system (rest_for_one)
    ├── store_writer
    ├── agents (one_for_one)
    └── drivers (one_for_one)
        └── <session id>#<n> ... one DriverRunner per session with driver turns (transient)

Rules (docs/drivers.md):

- A turn of a driver session is accepted in ONE transaction (``_driver_turns``); the
  session's runner is woken (:meth:`DriverHost.wake`) after the commit.
- At most one runner per session runs turns, one at a time, in number order. A runner
  retires when it finds no queued turn; a wake that comes meanwhile is never lost: waking
  and retiring are decided under one lock (``_pending``).
- Cancelling a running turn: the caller commits ``cancelling`` first, then
  :meth:`DriverHost.cancel` fires the run's signal.
- Closing: the system waits for the runners to go idle (up to its close timeout), then
  :meth:`DriverHost.stop` signals every run still going; the runner gives it the cancel
  grace, and a turn it could not finish is ``interrupted`` (never replayed).
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Sequence
from typing import Any

import pykka

from agentkeep.actors.supervisor import (
    Backoff,
    ChildSpec,
    ChildStartError,
    RestartIntensity,
    SupervisorRef,
    SupervisorStoppedError,
    start_supervisor,
)
from agentkeep.drivers.runner import DriverRunner, RunState
from agentkeep.drivers.types import Driver
from agentkeep.errors import (
    InvalidConfigError,
)
from agentkeep.logs import get_logger
from agentkeep.persistence.store import Store
from agentkeep.providers.credentials import CredentialResolver
from agentkeep.types.turns import NATIVE_DRIVER

log = get_logger(__name__)

#: The default turn timeout of an injected driver (the wire's ``turnTimeoutMs``).
DEFAULT_TURN_TIMEOUT_SECONDS = 600.0
#: How long a cancelled run may take to return before it is abandoned.
DEFAULT_CANCEL_GRACE_SECONDS = 1.0
_RUNNER_SHUTDOWN_SECONDS = 0.5


def check_drivers(drivers: object) -> list[Driver]:
    """The drivers given to ``AgentSystem.open``, checked.

    Raises:
        InvalidConfigError: not a list of drivers, an id that is empty, reserved
            (``agentkeep``) or given twice, or a ``run`` that is not callable.
    """
    if isinstance(drivers, str | bytes) or not isinstance(drivers, Sequence):
        raise InvalidConfigError(f"drivers must be a list, got {type(drivers).__name__}")
    seen: set[str] = set()
    for index, driver in enumerate(drivers):
        driver_id = getattr(driver, "id", None)
        if not isinstance(driver_id, str) or not driver_id.strip():
            raise InvalidConfigError(
                f"drivers[{index}] ({type(driver).__name__}) needs an id: a non-empty string"
            )
        if not callable(getattr(driver, "run", None)):
            raise InvalidConfigError(
                f'drivers[{index}] ("{driver_id}") has no run(request, context) method'
            )
        if driver_id == NATIVE_DRIVER:
            raise InvalidConfigError(
                f'drivers[{index}] uses the reserved id "{NATIVE_DRIVER}" (the native loop)'
            )
        if driver_id in seen:
            raise InvalidConfigError(f'drivers[{index}]: the id "{driver_id}" is given twice')
        seen.add(driver_id)
    return list(drivers)


def check_seconds(name: str, value: object, *, zero: bool) -> float:
    """A finite number of seconds, > 0 (or >= 0 with ``zero``); ``InvalidConfigError``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and not zero)
    ):
        bound = ">= 0" if zero else "> 0"
        raise InvalidConfigError(
            f"{name} must be a finite number of seconds {bound}, got {value!r}"
        )
    return float(value)


class DriverHost:
    """The system's injected drivers and their runners (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        drivers: Sequence[Driver],
        *,
        turn_timeout_seconds: float,
        cancel_grace_seconds: float,
        intensity: RestartIntensity,
        backoff: Backoff,
        credentials: CredentialResolver | None = None,
    ) -> None:
        self.store = store.handle
        #: The partition the system owns (None: the whole store): its sessions only resume.
        self.partition = store.partition
        #: Resolves a revision's ``authRef`` for its driver (``DriverContext.credential``).
        self.credentials = credentials
        self.hub = store.ledger
        self.max_event_bytes = store.ledger.max_event_bytes
        self.drivers: dict[str, Driver] = {driver.id: driver for driver in drivers}
        self.turn_timeout_seconds = turn_timeout_seconds
        self.cancel_grace_seconds = cancel_grace_seconds
        self.active: dict[str, RunState] = {}  # by turn id, while its runner runs it
        self.stopping = False
        # Bumped by a tier restart: runners of an older generation stop looking for work.
        self.generation = 0
        self._intensity = intensity
        self._backoff = backoff
        self._supervisor: SupervisorRef | None = None
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._runners: dict[str, pykka.ActorRef[Any]] = {}
        self._pending: set[str] = set()  # sessions woken since their runner last looked
        self._numbers = itertools.count(1)

    @property
    def ids(self) -> frozenset[str]:
        """The registered driver ids."""
        return frozenset(self.drivers)

    # -- the tier --------------------------------------------------------------------------
    def start_tier(self) -> pykka.ActorRef[Any]:
        """Start the drivers supervisor (the system supervisor's ``drivers`` child start).

        Started again after a tier restart (a store writer failure): the old runners are
        gone, so every session with a live driver turn is woken from a background thread
        (this one is the system supervisor's); its runner interrupts the turns that were
        running and runs the queued ones.
        """
        restarted = self._supervisor is not None
        supervisor = start_supervisor(
            "drivers", strategy="one_for_one", intensity=self._intensity, backoff=self._backoff
        )
        self._supervisor = supervisor
        if restarted:
            # The old runners may still be watching a run (pykka cannot stop an actor busy
            # in a message): cut their runs off and let them end; the new runners interrupt
            # the turns they were running, never running two turns of a session at once
            # (an old runner writes nothing more: its run's context is closed).
            self.generation += 1
            for state in list(self.active.values()):
                state.request_cancel("the drivers tier restarted", stopping=True)
            self._runners.clear()
            threading.Thread(
                target=self._resume, name="agentkeep-drivers-resume", daemon=True
            ).start()
        return supervisor.actor_ref

    def _resume(self) -> None:
        try:
            turns = self.store.read(lambda tx: tx.turns.all_live())
        except Exception as error:  # the store went away: the next open recovers them
            log.warning("driver_tier_resume_failed", error=repr(error))
            return
        partition = self.partition
        for session_id in sorted({t.session_id for t in turns if t.driver != NATIVE_DRIVER}):
            if partition is None or partition.owns(session_id):  # another's is its owner's
                self.wake(session_id)

    # -- runners ---------------------------------------------------------------------------
    def wake(self, session_id: str) -> None:
        """Make sure the session's runner looks for queued turns (after an acceptance)."""
        with self._lock:
            if self.stopping:
                return
            self._pending.add(session_id)
            if session_id in self._runners:
                return
            supervisor = self._supervisor
            if supervisor is None:
                return
            spec = ChildSpec(
                id=f"{session_id}#{next(self._numbers)}",
                start=lambda: self._make_runner(session_id),
                restart="transient",
                # A runner busy with a run stops once the run ends (it was signalled first).
                shutdown_timeout_seconds=_RUNNER_SHUTDOWN_SECONDS,
            )
            try:
                self._runners[session_id] = supervisor.start_child(spec)
            except (SupervisorStoppedError, ChildStartError) as error:
                log.warning("driver_runner_start_failed", session_id=session_id, error=repr(error))

    def wake_soon(self, session_id: str) -> None:
        """:meth:`wake` from a thread of its own (for a caller that must not block)."""
        threading.Thread(
            target=self.wake, args=(session_id,), name="agentkeep-driver-wake", daemon=True
        ).start()

    def _make_runner(self, session_id: str) -> pykka.ActorRef[Any]:
        # Called in the supervisor's thread, also on a restart (no lock: a waker may hold
        # it while it asks this supervisor to start the runner).
        ref: pykka.ActorRef[Any] = DriverRunner.start(self, session_id)
        self._runners[session_id] = ref
        return ref

    def retire(self, session_id: str, ref: pykka.ActorRef[Any]) -> bool:
        """A runner found no work: True if it may stop (no wake came since it looked)."""
        with self._lock:
            if session_id in self._pending and not self.stopping:
                self._pending.discard(session_id)
                return False
            if self._runners.get(session_id) is ref or (
                session_id in self._runners and self._runners[session_id].actor_urn == ref.actor_urn
            ):
                del self._runners[session_id]
            self._changed.notify_all()
            return True

    def turn_ended(self, session_id: str) -> None:
        """A runner ended a turn: wake whoever waits for the runners to go idle."""
        with self._lock:
            self._changed.notify_all()

    def cancel(self, turn_id: str) -> None:
        """Fire the running turn's cancel signal (its ``cancelling`` is durable already)."""
        state = self.active.get(turn_id)
        if state is not None:
            state.request_cancel("cancelled")

    def wait_idle(self, timeout_seconds: float | None) -> bool:
        """Block until no runner has work (False on timeout)."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._runners, timeout_seconds)

    def stop(self) -> None:
        """No new runs; signal every run still going (the system is closing) and wait, at
        most the cancel grace and a second, for their runners to end their turns (while the
        store's writer still runs)."""
        with self._lock:
            self.stopping = True
        for state in list(self.active.values()):
            state.request_cancel("the system is closing", stopping=True)
        with self._changed:
            self._changed.wait_for(lambda: not self.active, self.cancel_grace_seconds + 1.0)


__all__ = [
    "DEFAULT_CANCEL_GRACE_SECONDS",
    "DEFAULT_TURN_TIMEOUT_SECONDS",
    "DriverHost",
    "check_drivers",
    "check_seconds",
]
