"""Deadlines served by one thread: what to call once each passes, unless it is cancelled first.

The loop's timers (``actors/loop_timers.py``: a retry's backoff, the bound on a held block)
and the idle-grace timers (``actors/passivation.py``) are each a :class:`Sweeper`: a
``threading.Timer`` per deadline would cost a thread start per step. A sweeper's
thread lives while some deadline is pending (and ``linger_seconds`` after), so an idle
process holds no thread for it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable

from agentkeep.logs import get_logger

log = get_logger(__name__)


class Sweeper:
    """Pending deadlines, each with what to call when it passes, served by one thread.

    When a deadline passes, the sweeper drops it and calls its ``fire`` in its own (daemon)
    thread, holding no lock, one after the other: ``fire`` should not block (the loop's
    timers tell an actor; the idle-grace timers passivate an agent).

    Locking: one condition, a leaf. It guards only the deadline table and the sweeper's
    existence; no method calls anything else while holding it.

    The loop's hold is armed and cancelled on nearly every step, so two rules keep that from costing
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

    def forget_passed(self, key: Hashable) -> None:
        """Drop ``key``'s deadline only if it has passed (one scheduled since stays)."""
        with self._changed:
            pending = self._deadlines.get(key)
            if pending is not None and pending[0] <= time.monotonic():
                del self._deadlines[key]

    def cancel_all(self) -> None:
        """Drop every pending deadline and wake the sweeper (so it lingers, then exits)."""
        with self._changed:
            self._deadlines.clear()
            self._changed.notify()

    def pending(self) -> int:
        """How many deadlines are pending (for tests and diagnostics)."""
        with self._changed:
            return len(self._deadlines)

    def pending_keys(self) -> list[Hashable]:
        """The keys with a pending deadline (for tests and diagnostics)."""
        with self._changed:
            return list(self._deadlines)

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
                except Exception as error:  # one deadline's failure must not end the sweeper
                    log.exception("sweeper_fire_failed", sweeper=self._name, error=repr(error))

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
