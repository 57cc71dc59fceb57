"""The cancellable waits an agent loop asks for (``StartTimer``): a retry's backoff, and the
bound on how long a finished block is held (``loop.inference.hold``).

A wait never sleeps in the actor's thread — the loop keeps taking its mailbox, so an abort, a
close or a shutdown during the wait is handled at once. When a wait ends the actor is told
``TimerFired``; a cancelled wait's tick, if it still arrives, is ignored by the loop (nothing
it waits for names that timer any more).

One sweeper thread serves the waits of every agent of the process (:data:`SWEEPER`, an
``actors/sweeper.py`` :class:`Sweeper`): a hold is armed and nearly always cancelled on
every step, which a ``threading.Timer`` each (a thread start) would make cost more than the
rest of the step's hand-offs. Arming and cancelling take one leaf lock; the sweeper lives
while some wait is pending and exits a few seconds after none is, so an idle process holds
no thread for it.
"""

from __future__ import annotations

from contextlib import suppress
from typing import Any

import pykka

from agentkeep.actors.sweeper import Sweeper
from agentkeep.loop.events import TimerFired

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
