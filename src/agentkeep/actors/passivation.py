"""The idle-grace timers: an agent whose run settled keeps its actor for
``idle_grace_seconds``, then is passivated (its actor stops; its durable state is untouched
and accepted work starts it again).

One sweeper thread (an ``actors/sweeper.py`` :class:`Sweeper`) serves every agent of a
system (a ``threading.Timer`` per settlement cost a thread start on every step).
It lives while some agent has a deadline and exits when none has, so an idle system holds
no thread for it.
"""

from __future__ import annotations

from collections.abc import Callable

from agentkeep.actors.sweeper import Sweeper
from agentkeep.logs import get_logger

log = get_logger(__name__)


class PassivationTimers:
    """One pending passivation deadline per agent, served by one sweeper thread.

    When an agent's deadline passes, the sweeper drops it and calls ``passivate(agent_id)``
    in its own (daemon) thread, holding no lock; ``passivate`` decides whether the agent is
    still idle. Agents due together are passivated one after the other.

    Locking: the sweeper's condition, a leaf. It guards only the deadline table and the
    sweeper's existence; no method calls anything else while holding it (scheduling never
    blocks), so the agent tier calls these under its own lock (order: tier lock, then
    this one).

    Args:
        grace_seconds: How long after its run settled an idle agent keeps its actor.
        passivate: Called with the agent's id when its deadline passes.
    """

    def __init__(self, grace_seconds: float, passivate: Callable[[str], None]) -> None:
        self._grace_seconds = grace_seconds
        self._passivate = passivate
        # No linger: the thread exits as soon as no agent has a deadline.
        self._sweeper = Sweeper("agentkeep-passivation", linger_seconds=0.0)

    def schedule(self, agent_id: str) -> None:
        """(Re)start the agent's grace period: any pending deadline is replaced."""

        def fire() -> None:
            try:
                self._passivate(agent_id)
            except Exception as error:  # one agent's failure must not end the sweeper
                log.exception("agent_passivation_failed", agent_id=agent_id, error=repr(error))

        self._sweeper.schedule(agent_id, self._grace_seconds, fire)

    def cancel(self, agent_id: str) -> None:
        """Cancel the agent's pending deadline, if any (work arrived, or it was removed)."""
        self._sweeper.cancel(agent_id)

    def forget(self, agent_id: str) -> None:
        """The agent is being passivated now: drop a deadline of its that has passed (one
        scheduled since, for a later settlement, stays)."""
        self._sweeper.forget_passed(agent_id)

    def cancel_all(self) -> None:
        """Cancel every pending deadline (the system is stopping); the sweeper exits."""
        self._sweeper.cancel_all()

    def pending(self) -> list[str]:
        """The agents with a pending deadline, sorted (for tests and diagnostics)."""
        return sorted(str(agent_id) for agent_id in self._sweeper.pending_keys())
