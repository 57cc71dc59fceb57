"""Events waiting for an agent's actor: held while it (or the whole agent tier) restarts, and
handed to the next incarnation, so a caller whose work was durably accepted is never told an
error because a restart happened to be in progress."""

from __future__ import annotations

import threading
from typing import Any, NamedTuple


class HeldEvent(NamedTuple):
    """An event on its way to an agent's actor. ``counted``: it keeps ``wait_for_idle``
    waiting until the actor took it on (``AgentStatus.signal_sent`` when handed over)."""

    event: Any
    counted: bool


class HeldEvents:
    """The held events of every agent, in the order they were told.

    Locking: one lock, a leaf. It guards only the per-agent lists; no method calls anything
    else while holding it, so it may be taken under any other lock (the agent tier's) and from
    any thread, the agents supervisor's included.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, list[HeldEvent]] = {}

    def hold(self, agent_id: str, event: Any, *, counted: bool) -> None:
        """Append ``event`` to the agent's held events."""
        with self._lock:
            self._held.setdefault(agent_id, []).append(HeldEvent(event, counted))

    def take(self, agent_id: str) -> list[HeldEvent]:
        """Remove and return the agent's held events (empty if none), oldest first."""
        with self._lock:
            return self._held.pop(agent_id, [])

    def put_back(self, agent_id: str, events: list[HeldEvent]) -> None:
        """Return ``events`` (taken, but not handed over) ahead of any held since."""
        with self._lock:
            self._held[agent_id] = events + self._held.get(agent_id, [])

    def waiting(self, agent_id: str) -> bool:
        """Whether the agent has events held (possibly an empty list put back)."""
        with self._lock:
            return agent_id in self._held

    def drop(self, agent_id: str) -> None:
        """Forget the agent's held events (it was removed: nobody will run them)."""
        with self._lock:
            self._held.pop(agent_id, None)

    def agent_ids(self) -> set[str]:
        """The agents with events held."""
        with self._lock:
            return set(self._held)

    def clear(self) -> None:
        """Forget every held event (the system is stopping)."""
        with self._lock:
            self._held.clear()
