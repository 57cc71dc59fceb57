"""The idle-grace timers: an agent whose run settled keeps its actor for
``idle_grace_seconds``, then is passivated (its actor stops; its durable state is untouched
and accepted work starts it again)."""

from __future__ import annotations

import threading
from collections.abc import Callable


class PassivationTimers:
    """One pending passivation timer per agent.

    Each timer, when it fires, calls ``passivate(agent_id)`` in its own (daemon) thread,
    holding no lock; ``passivate`` decides whether the agent is still idle.

    Locking: one lock, a leaf. It guards only the timer table; no method calls anything else
    while holding it (starting or cancelling a ``threading.Timer`` never blocks), so the
    registry calls these under its own lock (order: registry lock, then this one).

    Args:
        grace_seconds: How long after its run settled an idle agent keeps its actor.
        passivate: Called with the agent's id when its timer fires.
    """

    def __init__(self, grace_seconds: float, passivate: Callable[[str], None]) -> None:
        self._grace_seconds = grace_seconds
        self._passivate = passivate
        self._lock = threading.Lock()
        self._timers: dict[str, threading.Timer] = {}

    def schedule(self, agent_id: str) -> None:
        """(Re)start the agent's timer: any pending one is cancelled first."""
        timer = threading.Timer(self._grace_seconds, self._passivate, (agent_id,))
        timer.daemon = True
        with self._lock:
            previous = self._timers.pop(agent_id, None)
            if previous is not None:
                previous.cancel()
            self._timers[agent_id] = timer
            timer.start()

    def cancel(self, agent_id: str) -> None:
        """Cancel the agent's pending timer, if any (work arrived, or it was removed)."""
        with self._lock:
            timer = self._timers.pop(agent_id, None)
            if timer is not None:
                timer.cancel()

    def forget(self, agent_id: str) -> None:
        """Drop the agent's timer entry without cancelling it (it is firing now)."""
        with self._lock:
            self._timers.pop(agent_id, None)

    def cancel_all(self) -> None:
        """Cancel every pending timer (the system is stopping)."""
        with self._lock:
            for timer in self._timers.values():
                timer.cancel()
            self._timers.clear()
