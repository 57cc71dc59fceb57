"""What callers outside an agent's actor may wait on: idleness, a compaction, an unwound turn.

The actor changes it; any thread reads it. ``signals`` counts work handed to the actor that it
has not yet taken on (a message accepted but not yet seen by the loop), so ``wait_for_idle``
right after a ``send`` waits for that message's turn rather than returning early.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager

from agentkeep.actors.consume_claim import ConsumeClaim
from agentkeep.errors import CompactionFailedError


class AgentStatus:
    """The idle accounting of one agent, across its actor incarnations.

    ``signal_sent`` / ``signal_taken`` count events handed to the actor and not yet taken on;
    ``set_running`` says whether a run is in progress; the agent is idle when neither.

    Locking: one condition, a leaf. It guards ``_running``, ``_signals`` and
    ``_compactions``; its only waiters wait for idleness, so it is notified exactly when the
    agent turns idle (a change that leaves it busy, or idle, wakes nobody: on the step's
    critical path a waiter woken only to wait again costs a thread switch); nothing
    is called while holding it (compaction futures are resolved after it is released), so
    any thread may call any method under any other lock. ``abort_pending`` is a plain flag
    outside it (one writer at a time: the system sets it, the actor clears it).
    """

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._running = False
        self._signals = 0
        self._compactions: list[Future[None]] = []
        self._tools = 0  # tool executions in progress (what a waited cross-agent compact checks)
        # Set the moment abort() is called, before the AbortRequested reaches the mailbox:
        # a hook running meanwhile loses its actions. Cleared when it is taken.
        self.abort_pending = False
        # The idle actor's published consumption claim (``actors.consume_claim``), or None.
        # A plain reference: the actor replaces it, an acceptance reads it and takes the
        # claim itself, atomically.
        self.claim: ConsumeClaim | None = None

    # -- written by the system and the actor ---------------------------------------------------

    def signal_sent(self) -> None:
        """An event that counts was handed to the actor (by the agent tier)."""
        with self._condition:
            self._signals += 1

    def signal_taken(self) -> None:
        """The actor took on a counted event (or none is coming after all)."""
        with self._condition:
            was_idle = self._is_idle()
            self._signals = max(0, self._signals - 1)
            self._notify_if_turned_idle(was_idle)

    def set_running(self, running: bool) -> None:
        """Whether the actor's loop has a run in progress (after each event it took)."""
        if running == self._running:
            # Unchanged (most events of a step): idleness cannot change, nobody is woken, so
            # the condition is not taken. Read without it: only the actor writes
            # ``_running`` but for ``start_over`` (a restart), and this check then orders
            # before it, as if taken first.
            return
        with self._condition:
            was_idle = self._is_idle()
            self._running = running
            self._notify_if_turned_idle(was_idle)

    def _is_idle(self) -> bool:
        # Called holding the condition.
        return not self._running and self._signals == 0

    def _notify_if_turned_idle(self, was_idle: bool) -> None:
        # Called holding the condition: the waiters' predicate became true just now.
        if not was_idle and self._is_idle():
            self._condition.notify_all()

    @contextmanager
    def running_tool(self) -> Iterator[None]:
        """Count one tool execution of this agent for the block (``running_tool``)."""
        with self._condition:
            self._tools += 1
        try:
            yield
        finally:
            with self._condition:
                self._tools -= 1

    def hold_for_restart(self) -> None:
        """A restart of this agent's actor is coming (its store writer failed): no waiter may
        see it idle until the restart resets the status (``start_over``)."""
        with self._condition:
            self._signals += 1

    def start_over(self, *, pending: int = 0) -> None:
        """Forget what the previous incarnation left (a crash, a tier restart, a stop): its
        counts may never settle, and its successor (if any) starts from the store. Waiting
        restarts from a clean slate: ``pending`` signals already on their way to it (its
        Start), set in the same step so no waiter sees a false idle. A compaction it was
        asked for is not confirmed: its waiters are told so (they may ask again)."""
        with self._condition:
            self._signals = pending
            self._running = False
            self.abort_pending = False  # an abort the crashed incarnation never took
            self._condition.notify_all()
        self.resolve_compactions(
            "The agent's actor restarted before the compaction was confirmed; check "
            "context_tokens or request the compaction again."
        )

    def add_compaction_waiter(self) -> Future[None]:
        """A future resolved by the next compaction outcome (callers share one compaction)."""
        future: Future[None] = Future()
        with self._condition:
            self._compactions.append(future)
        return future

    def resolve_compactions(self, error: str | None) -> None:
        """Resolve every compaction waiter: done (``error`` None) or failed with
        ``CompactionFailedError(error)``."""
        with self._condition:
            waiters, self._compactions = self._compactions, []
        for future in waiters:
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(CompactionFailedError(error))

    # -- read by anyone ------------------------------------------------------------------------

    @property
    def tool_running(self) -> bool:
        """Whether one of the agent's tools is executing now."""
        with self._condition:
            return self._tools > 0

    @property
    def idle(self) -> bool:
        """Whether the agent has no run in progress and no work handed to it, now."""
        with self._condition:
            return self._is_idle()

    def wait_for_idle(self, timeout_seconds: float | None = None) -> bool:
        """Block until the agent has no run in progress and no work handed to it; False
        on timeout."""
        with self._condition:
            return self._condition.wait_for(self._is_idle, timeout_seconds)
