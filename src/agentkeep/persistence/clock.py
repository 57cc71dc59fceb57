"""The clock the store's timestamps come from: the system clock, or the one an embedder
injected (``AgentSystem.open(now=...)``).

Every timestamp the runtime persists is written inside a store transaction, on the store
writer's thread (the migrations' on the opening thread), and read there through
:func:`now_ms`. A store installs its clock on those threads (:func:`install`) for as long as
they serve it, so two stores of one process each keep their own clock. A thread without one
reads the system clock. Monotonic timers (timeouts, backoffs, grace periods) never use it.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from agentkeep.errors import InvalidConfigError

#: An injected clock: returns the current time, as seconds since the Unix epoch (an int or a
#: float, like :func:`time.time`) or as a timezone-aware :class:`datetime.datetime`.
Clock = Callable[[], float | int | datetime.datetime]

_local = threading.local()


def system_ms() -> int:
    """The system clock, in whole milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


def as_ms(clock: Clock) -> Callable[[], int]:
    """``clock`` as a milliseconds function.

    Raises:
        InvalidConfigError: ``clock`` is not callable. A call returning something that is not
            a number or an aware datetime raises the same error when it happens.
    """
    if not callable(clock):
        raise InvalidConfigError(f"now must be a function returning the time, got {clock!r}")

    def read() -> int:
        value = clock()
        if isinstance(value, datetime.datetime):
            if value.tzinfo is None:
                raise InvalidConfigError(f"now() returned a naive datetime ({value!r})")
            return int(value.timestamp() * 1000)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidConfigError(f"now() must return seconds or a datetime, got {value!r}")
        return int(value * 1000)

    return read


def now_ms() -> int:
    """The current time, in milliseconds since the epoch, by this thread's store clock (the
    system clock on a thread that serves no store with an injected one)."""
    clock: Callable[[], int] | None = getattr(_local, "clock", None)
    return system_ms() if clock is None else clock()


def install(clock: Callable[[], int] | None) -> None:
    """Make ``clock`` this thread's clock (None: the system clock) until replaced."""
    _local.clock = clock


@contextmanager
def using(clock: Callable[[], int] | None) -> Iterator[None]:
    """This thread reads ``clock`` inside the block, and its previous clock after it."""
    previous = getattr(_local, "clock", None)
    _local.clock = clock
    try:
        yield
    finally:
        _local.clock = previous
