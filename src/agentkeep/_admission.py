"""Who may still start an operation on an AgentSystem, and what closing and deleting wait for.

Invariants:

- Once closing starts nothing new is admitted, and the close goes on only after every
  operation admitted before it has finished (written and told), so nothing accepted is
  stranded half-way.
- One close does the work; any other close or shutdown waits until the store is released,
  so when ``close()`` returns, whoever called it can reopen the store.
- While an agent is being deleted no new operation on it is admitted, and the delete waits for
  the ones admitted before it: no delivery can start an actor for an agent already removed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from agentkeep.errors import AgentClosedError


class Admission:
    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._closing = False
        self._admitted = 0
        self._deleting: set[str] = set()
        self._busy: dict[str, int] = {}  # operations admitted per agent
        self._closed = threading.Event()  # the store is released

    @contextmanager
    def operation(self) -> Iterator[None]:
        """Admit one operation on the system; raises ``AgentClosedError`` once closing."""
        with self._changed:
            if self._closing:
                raise AgentClosedError("The agent system has been closed.")
            self._admitted += 1
        try:
            yield
        finally:
            with self._changed:
                self._admitted -= 1
                # Only a close waits for the count, and it sets _closing (under this lock)
                # before it waits: no close, no waiter to wake.
                if self._closing_now():
                    self._changed.notify_all()

    @contextmanager
    def agent_operation(self, agent_id: str) -> Iterator[None]:
        """Admit one operation on ``agent_id``; raises while the agent is being deleted."""
        with self._changed:
            if agent_id in self._deleting:
                raise AgentClosedError(f'Agent "{agent_id}" is being deleted.')
            self._busy[agent_id] = self._busy.get(agent_id, 0) + 1
        try:
            yield
        finally:
            with self._changed:
                left = self._busy.pop(agent_id) - 1
                if left:
                    self._busy[agent_id] = left
                # Only a delete waits for an agent's operations, and it adds the agent to
                # _deleting (under this lock) before it waits: none, no waiter to wake.
                if self._deleting:
                    self._changed.notify_all()

    @contextmanager
    def deleting(self, agent_id: str, timeout_seconds: float | None) -> Iterator[None]:
        """Refuse new operations on ``agent_id`` and wait (up to the timeout) for the ones
        already admitted; the delete runs inside the block."""
        with self._changed:
            self._deleting.add(agent_id)
            self._changed.wait_for(lambda: agent_id not in self._busy, timeout_seconds)
        try:
            yield
        finally:
            with self._changed:
                self._deleting.discard(agent_id)

    def _closing_now(self) -> bool:
        # (read anew after the yield: a close may have begun while the operation ran)
        return self._closing

    def check_open(self) -> None:
        """Raise ``AgentClosedError`` once closing has begun (for reads, which need no slot)."""
        if self._closing:
            raise AgentClosedError("The agent system has been closed.")

    def begin_close(self, timeout_seconds: float | None) -> bool:
        """Stop admitting. True for the first caller, once the admitted operations finished
        (or the timeout passed): it must finish the close and call :meth:`closed`. False for
        any later caller, after waiting (up to the timeout) for that close to finish."""
        with self._changed:
            first, self._closing = not self._closing, True
            if first:
                self._changed.wait_for(lambda: self._admitted == 0, timeout_seconds)
        if not first:
            self._closed.wait(timeout_seconds)
        return first

    def closed(self) -> None:
        """The close has finished: the store is released."""
        self._closed.set()
