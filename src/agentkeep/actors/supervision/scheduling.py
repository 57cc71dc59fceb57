"""Time, injected: the scheduler a supervisor asks for delayed work, and a manual one for tests.

A supervisor never sleeps. It asks a :class:`Scheduler` to call it back later (a restart after
its backoff delay, the end of a child's shutdown timeout); the callback only ``tell``\\ s the
supervisor, so it never blocks and never runs supervisor code outside the supervisor's thread.
Tests inject :class:`ManualScheduler`, which records every request and runs it when the test
says so: the delays can be asserted and no real time passes.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Literal, Protocol

from agentkeep.logs import get_logger

log = get_logger(__name__)

Purpose = Literal["restart", "shutdown_timeout"]
"""Why a supervisor asked for a callback (for tests and logs)."""


class ScheduledCall:
    """A callback a scheduler will run once, unless cancelled first."""

    __slots__ = ("_cancelled", "_lock", "_ran", "callback", "delay_seconds", "purpose")

    def __init__(self, delay_seconds: float, callback: Callable[[], None], purpose: Purpose):
        self.delay_seconds = delay_seconds
        self.callback = callback
        self.purpose: Purpose = purpose
        self._lock = threading.Lock()
        self._cancelled = False
        self._ran = False

    def is_pending(self) -> bool:
        """Whether the call has neither run nor been cancelled."""
        with self._lock:
            return not (self._cancelled or self._ran)

    def cancel(self) -> None:
        """Make sure the callback does not run (a no-op if it already ran)."""
        with self._lock:
            self._cancelled = True

    def run(self) -> None:
        """Run the callback unless it was cancelled or already ran; never raises."""
        with self._lock:
            if self._cancelled or self._ran:
                return
            self._ran = True
        try:
            self.callback()
        except Exception:
            log.exception("scheduled_call_failed", purpose=self.purpose)

    def __repr__(self) -> str:
        state = "cancelled" if self._cancelled else "ran" if self._ran else "pending"
        return f"<ScheduledCall {self.purpose} after {self.delay_seconds:g} s, {state}>"


class Scheduler(Protocol):
    """Runs a callback after a delay, on some thread that is not the caller's."""

    def call_later(
        self, delay_seconds: float, callback: Callable[[], None], *, purpose: Purpose
    ) -> ScheduledCall:
        """Arrange for ``callback`` to run once after ``delay_seconds``; return its handle."""
        ...


class ThreadScheduler:
    """A real scheduler: one daemon thread runs the due callbacks in order.

    The thread starts with the first call and lives as long as the process; callbacks must be
    quick (a supervisor's only ``tell``). A daemon thread, because a pending restart must not
    keep a process alive after everything else has stopped.
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._condition = threading.Condition()
        self._queue: list[tuple[float, int, ScheduledCall]] = []
        self._sequence = itertools.count()
        self._thread: threading.Thread | None = None

    def call_later(
        self, delay_seconds: float, callback: Callable[[], None], *, purpose: Purpose
    ) -> ScheduledCall:
        call = ScheduledCall(delay_seconds, callback, purpose)
        with self._condition:
            due = self._clock() + max(0.0, delay_seconds)
            heapq.heappush(self._queue, (due, next(self._sequence), call))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="agentkeep-supervision-scheduler", daemon=True
                )
                self._thread.start()
            self._condition.notify()
        return call

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._queue or self._queue[0][0] > self._clock():
                    timeout = self._queue[0][0] - self._clock() if self._queue else None
                    self._condition.wait(timeout)
                _, _, call = heapq.heappop(self._queue)
            call.run()


_default_scheduler: ThreadScheduler | None = None
_default_scheduler_lock = threading.Lock()


def default_scheduler() -> ThreadScheduler:
    """The process-wide :class:`ThreadScheduler` supervisors use unless given one."""
    # One lazily started thread per process, shared by every supervisor.
    global _default_scheduler
    with _default_scheduler_lock:
        if _default_scheduler is None:
            _default_scheduler = ThreadScheduler()
        return _default_scheduler


class ManualScheduler:
    """A scheduler for tests: records every request and runs callbacks only when told to.

    Thread-safe: the supervisor schedules from its own thread while the test waits on
    :meth:`wait_for_pending` and then runs the calls with :meth:`run_pending`.
    """

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._calls: list[ScheduledCall] = []

    def call_later(
        self, delay_seconds: float, callback: Callable[[], None], *, purpose: Purpose
    ) -> ScheduledCall:
        call = ScheduledCall(delay_seconds, callback, purpose)
        with self._condition:
            self._calls.append(call)
            self._condition.notify_all()
        return call

    def requested_delays(self, purpose: Purpose = "restart") -> list[float]:
        """Every delay requested for ``purpose`` so far, in request order (run or not)."""
        with self._condition:
            return [c.delay_seconds for c in self._calls if c.purpose == purpose]

    def pending(self, purpose: Purpose = "restart") -> list[ScheduledCall]:
        """The calls for ``purpose`` that have neither run nor been cancelled."""
        with self._condition:
            return [c for c in self._calls if c.purpose == purpose and c.is_pending()]

    def wait_for_pending(
        self, count: int = 1, *, purpose: Purpose = "restart", timeout_seconds: float = 30.0
    ) -> list[ScheduledCall]:
        """Block until at least ``count`` calls for ``purpose`` are pending; return them.

        Raises:
            TimeoutError: If that many were not pending within ``timeout_seconds``.
        """
        with self._condition:
            ok = self._condition.wait_for(
                lambda: len(self._pending_locked(purpose)) >= count, timeout_seconds
            )
            if not ok:
                raise TimeoutError(
                    f"{count} pending {purpose} call(s) expected, "
                    f"have {len(self._pending_locked(purpose))}"
                )
            return self._pending_locked(purpose)

    def run_pending(self, purpose: Purpose = "restart") -> int:
        """Run every pending call for ``purpose`` (in request order); return how many ran."""
        calls = self.pending(purpose)
        for call in calls:
            call.run()
        return len(calls)

    def _pending_locked(self, purpose: Purpose) -> list[ScheduledCall]:
        return [c for c in self._calls if c.purpose == purpose and c.is_pending()]
