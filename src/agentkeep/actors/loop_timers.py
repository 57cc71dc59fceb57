"""The cancellable waits an agent loop asks for (``StartTimer``): a retry's backoff.

A wait never sleeps in the actor's thread — the loop keeps taking its mailbox, so an abort, a
close or a shutdown during the wait is handled at once. Each wait is a ``threading.Timer``
that tells the actor ``TimerFired``; a cancelled wait's tick, if it still arrives, is ignored
by the loop (its phase no longer names that timer).
"""

from __future__ import annotations

import threading
from contextlib import suppress
from typing import Any

import pykka

from agentkeep.loop.events import TimerFired


class LoopTimers:
    """One actor incarnation's pending waits (used from its thread only)."""

    def __init__(self) -> None:
        self._timers: dict[str, threading.Timer] = {}

    def start(self, actor_ref: pykka.ActorRef[Any], timer_id: str, seconds: float) -> None:
        """Tell ``actor_ref`` ``TimerFired(timer_id)`` after ``seconds``."""

        def fire() -> None:
            with suppress(pykka.ActorDeadError):  # the incarnation stopped meanwhile
                actor_ref.tell(TimerFired(timer_id=timer_id))

        timer = threading.Timer(seconds, fire)
        timer.daemon = True
        timer.name = f"agentkeep-timer-{timer_id}"
        self._timers[timer_id] = timer
        timer.start()

    def cancel(self, timer_id: str) -> None:
        timer = self._timers.pop(timer_id, None)
        if timer is not None:
            timer.cancel()

    def forget(self, timer_id: str) -> None:
        """The wait ended (its ``TimerFired`` was taken)."""
        self._timers.pop(timer_id, None)

    def cancel_all(self) -> None:
        """The incarnation stops: no wait outlives it."""
        for timer_id in list(self._timers):
            self.cancel(timer_id)
