"""The idle-grace timers: an agent whose run settled keeps its actor for
``idle_grace_seconds``, then is passivated (its actor stops; its durable state is untouched
and accepted work starts it again).

One sweeper thread serves every agent of a system (issue 17: a ``threading.Timer`` per
settlement cost a thread start on every step). It lives while some agent has a deadline and
exits when none has, so an idle system holds no thread for it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from agentkeep.logs import get_logger

log = get_logger(__name__)


class PassivationTimers:
    """One pending passivation deadline per agent, served by one sweeper thread.

    When an agent's deadline passes, the sweeper drops it and calls ``passivate(agent_id)``
    in its own (daemon) thread, holding no lock; ``passivate`` decides whether the agent is
    still idle. Agents due together are passivated one after the other.

    Locking: one condition, a leaf. It guards only the deadline table and the sweeper's
    existence; no method calls anything else while holding it (scheduling never blocks),
    so the registry calls these under its own lock (order: registry lock, then this one).

    Args:
        grace_seconds: How long after its run settled an idle agent keeps its actor.
        passivate: Called with the agent's id when its deadline passes.
    """

    def __init__(self, grace_seconds: float, passivate: Callable[[str], None]) -> None:
        self._grace_seconds = grace_seconds
        self._passivate = passivate
        self._changed = threading.Condition(threading.Lock())
        self._deadlines: dict[str, float] = {}
        self._sweeper: threading.Thread | None = None
        self._waking_at: float | None = None  # when the sweeper wakes next (None: awake)

    def schedule(self, agent_id: str) -> None:
        """(Re)start the agent's grace period: any pending deadline is replaced."""
        deadline = time.monotonic() + self._grace_seconds
        with self._changed:
            self._deadlines[agent_id] = deadline
            if self._sweeper is None:
                self._sweeper = threading.Thread(
                    target=self._sweep, name="agentkeep-passivation", daemon=True
                )
                self._sweeper.start()
            elif self._waking_at is not None and deadline < self._waking_at:
                self._changed.notify()  # sooner than the sweeper planned to look

    def cancel(self, agent_id: str) -> None:
        """Cancel the agent's pending deadline, if any (work arrived, or it was removed)."""
        with self._changed:
            self._deadlines.pop(agent_id, None)

    def forget(self, agent_id: str) -> None:
        """The agent is being passivated now: drop a deadline of its that has passed (one
        scheduled since, for a later settlement, stays)."""
        with self._changed:
            deadline = self._deadlines.get(agent_id)
            if deadline is not None and deadline <= time.monotonic():
                del self._deadlines[agent_id]

    def cancel_all(self) -> None:
        """Cancel every pending deadline (the system is stopping); the sweeper exits."""
        with self._changed:
            self._deadlines.clear()
            self._changed.notify()

    def pending(self) -> list[str]:
        """The agents with a pending deadline, sorted (for tests and diagnostics)."""
        with self._changed:
            return sorted(self._deadlines)

    def _sweep(self) -> None:
        while True:
            with self._changed:
                due = self._take_due()
                if due is None:
                    self._sweeper = None  # under the lock: the next schedule starts one
                    return
            for agent_id in due:
                try:
                    self._passivate(agent_id)
                except Exception as error:  # one agent's failure must not end the sweeper
                    log.exception("agent_passivation_failed", agent_id=agent_id, error=repr(error))

    def _take_due(self) -> list[str] | None:
        """Wait (holding the condition) until some deadline passed and take those agents;
        None once no agent has a deadline."""
        while self._deadlines:
            now = time.monotonic()
            due = [a for a, deadline in self._deadlines.items() if deadline <= now]
            if due:
                for agent_id in due:
                    del self._deadlines[agent_id]
                return due
            self._waking_at = min(self._deadlines.values())
            self._changed.wait(self._waking_at - now)
            self._waking_at = None
        return None
