"""The cancellable waits an agent loop asks for (``StartTimer``): a retry's backoff, and the
bound on how long a finished block is held (``loop.inference.hold``).

A wait never sleeps in the actor's thread — the loop keeps taking its mailbox, so an abort, a
close or a shutdown during the wait is handled at once. When a wait ends the actor is told
``TimerFired``; a cancelled wait's tick, if it still arrives, is ignored by the loop (nothing
it waits for names that timer any more).

One sweeper thread serves the waits of every agent of the process (:class:`Sweeper`): a hold
is armed and nearly always cancelled on every step, which a ``threading.Timer`` each (a
thread start) would make cost more than the rest of the step's hand-offs. Arming and
cancelling take one leaf lock; the sweeper lives while some wait is pending and exits a few
seconds after none is, so an idle process holds no thread for it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from contextlib import suppress
from typing import Any

import pykka

from agentkeep.logs import get_logger
from agentkeep.loop.events import TimerFired

log = get_logger(__name__)


class Sweeper:
    """Pending deadlines, each with what to call when it passes, served by one thread.

    When a deadline passes, the sweeper drops it and calls its ``fire`` in its own (daemon)
    thread, holding no lock. ``fire`` must not block (it tells an actor).

    Locking: one condition, a leaf. It guards only the deadline table and the sweeper's
    existence; no method calls anything else while holding it.

    A hold is armed and cancelled on nearly every step, so two rules keep that from costing
    a thread start or a wake-up per step: the sweeper lingers ``linger_seconds`` after its
    last deadline went (one that exited whenever none was pending would be started again by
    the next step), and while nothing is pending it looks every ``tick_seconds`` (a
    scheduler wakes it only for a deadline sooner than its next look: a lingering sweeper
    that slept until the linger's end would be woken by every step's hold).

    Args:
        name: The sweeper thread's name.
        linger_seconds: How long the thread outlives its last pending deadline.
        tick_seconds: How often a sweeper with nothing pending looks again.
    """

    def __init__(
        self, name: str, *, linger_seconds: float = 5.0, tick_seconds: float = 0.05
    ) -> None:
        self._name = name
        self._linger_seconds = linger_seconds
        self._tick_seconds = tick_seconds
        self._changed = threading.Condition(threading.Lock())
        self._deadlines: dict[Hashable, tuple[float, Callable[[], None]]] = {}
        self._thread: threading.Thread | None = None
        self._waking_at: float | None = None  # when the sweeper wakes next (None: awake)

    def schedule(self, key: Hashable, seconds: float, fire: Callable[[], None]) -> None:
        """Call ``fire`` once ``seconds`` passed, unless ``key`` is cancelled first (a
        pending ``key`` is replaced)."""
        deadline = time.monotonic() + seconds
        with self._changed:
            self._deadlines[key] = (deadline, fire)
            if self._thread is None:
                self._thread = threading.Thread(target=self._sweep, name=self._name, daemon=True)
                self._thread.start()
            elif self._waking_at is not None and deadline < self._waking_at:
                self._changed.notify()  # sooner than the sweeper planned to look

    def cancel(self, key: Hashable) -> None:
        """Drop ``key``'s deadline, if pending. (A cancelled deadline does not wake the
        sweeper: it finds it gone when it next looks.)"""
        with self._changed:
            self._deadlines.pop(key, None)

    def pending(self) -> int:
        """How many deadlines are pending (for tests and diagnostics)."""
        with self._changed:
            return len(self._deadlines)

    def _sweep(self) -> None:
        while True:
            with self._changed:
                due = self._take_due()
                if due is None:
                    self._thread = None  # under the lock: the next schedule starts one
                    return
            for fire in due:
                try:
                    fire()
                except Exception as error:  # one wait's failure must not end the sweeper
                    log.exception("loop_timer_failed", error=repr(error))

    def _take_due(self) -> list[Callable[[], None]] | None:
        """Wait (holding the condition) until some deadline passed and take those; None
        once none has been pending for ``linger_seconds``."""
        idle_until: float | None = None  # when a sweeper with nothing pending exits
        while True:
            now = time.monotonic()
            if self._deadlines:
                idle_until = None
                due = [key for key, (deadline, _) in self._deadlines.items() if deadline <= now]
                if due:
                    return [self._deadlines.pop(key)[1] for key in due]
                wake = min(deadline for deadline, _ in self._deadlines.values())
            else:
                if idle_until is None:
                    idle_until = now + self._linger_seconds
                elif now >= idle_until:
                    return None
                wake = min(idle_until, now + self._tick_seconds)
            self._waking_at = wake
            self._changed.wait(wake - now)
            self._waking_at = None


#: The process's loop timers: every agent's waits.
SWEEPER = Sweeper("agentkeep-loop-timers")


class LoopTimers:
    """One actor incarnation's pending waits (used from its thread only).

    Args:
        sweeper: What serves the waits (the process's, unless a test brings its own).
    """

    def __init__(self, sweeper: Sweeper = SWEEPER) -> None:
        self._sweeper = sweeper
        self._timers: set[str] = set()

    def start(self, actor_ref: pykka.ActorRef[Any], timer_id: str, seconds: float) -> None:
        """Tell ``actor_ref`` ``TimerFired(timer_id)`` after ``seconds``."""

        def fire() -> None:
            with suppress(pykka.ActorDeadError):  # the incarnation stopped meanwhile
                actor_ref.tell(TimerFired(timer_id=timer_id))

        self._timers.add(timer_id)
        self._sweeper.schedule((self, timer_id), seconds, fire)

    def cancel(self, timer_id: str) -> None:
        if timer_id in self._timers:
            self._timers.discard(timer_id)
            self._sweeper.cancel((self, timer_id))

    def forget(self, timer_id: str) -> None:
        """The wait ended (its ``TimerFired`` was taken)."""
        self._timers.discard(timer_id)

    def cancel_all(self) -> None:
        """The incarnation stops: no wait outlives it."""
        for timer_id in list(self._timers):
            self.cancel(timer_id)
