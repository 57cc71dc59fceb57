"""A one-shot latch on one C lock: the part of ``threading.Event`` the actor shell uses, made
cheaply (an ``Event`` builds a ``Condition`` in Python, ~3–5 µs, and the agent's
thread made two per step — one per consumption claim, one per stream)."""

from __future__ import annotations

import threading


class Latch:
    """Set once, waited for by any number of threads.

    Invariant: ``_lock`` is held (by nobody in particular) from construction until
    :meth:`set` releases it; a waiter acquires it and at once releases it again, so every
    waiter passes once it is set. ``_set`` turns True before the release, so :meth:`is_set`
    never reads a waiter's momentary hold as "not set".
    """

    __slots__ = ("_lock", "_set")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._set = False

    def set(self) -> None:
        """Open the latch. Only one thread may ever set it (its owner); later calls from
        that thread do nothing."""
        if self._set:
            return
        self._set = True
        self._lock.release()

    def is_set(self) -> bool:
        """Whether :meth:`set` has been called."""
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the latch is set, at most ``timeout`` seconds (None: no limit);
        whether it is set."""
        if self._set:
            return True
        if timeout is None:
            acquired = self._lock.acquire()
        elif timeout <= 0:
            acquired = self._lock.acquire(blocking=False)
        else:
            acquired = self._lock.acquire(timeout=timeout)
        if acquired:
            self._lock.release()
        return acquired
