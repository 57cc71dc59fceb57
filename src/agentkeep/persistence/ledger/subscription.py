"""A reader's view of one session's ledger: :class:`Subscription` (docs/ledger.md).

Invariant: a subscription hands out every committed event from ``after`` on exactly once and
in sequence order, whatever the timing: it never trusts a payload from memory, it reads each
event by sequence from the store, and the hub (:mod:`.hub`) only says when to look. It
re-reads the store whenever it wakes, and at least every ``poll`` seconds, so a missed or
coalesced notification costs at most a wait.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from agentkeep.errors import AgentClosedError, InvalidConfigError, StoreClosedError
from agentkeep.persistence.ledger.hub import LedgerHub
from agentkeep.types import SessionEvent
from agentkeep.types.ledger import MAX_EVENTS_PAGE

if TYPE_CHECKING:
    from agentkeep.persistence.interface import Transaction

__all__ = ["Subscription", "check_page"]


def check_page(after: int, limit: int) -> None:
    """Refuse a page request no caller should make, naming what is wrong."""
    if not isinstance(after, int) or isinstance(after, bool) or after < 0:
        raise InvalidConfigError(f"after must be a sequence >= 0, got {after!r}")
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_EVENTS_PAGE:
        raise InvalidConfigError(f"limit must be between 1 and {MAX_EVENTS_PAGE}, got {limit!r}")


class Subscription:
    """A session's committed events from ``after`` on: the backlog, then live events as they
    commit, each exactly once and in sequence order. Iterate it (blocking until the next
    event; the iteration ends when it or the system is closed) or call :meth:`next` with a
    timeout. Usable from any thread; one consumer at a time.

    Every event is read from the store by sequence; the hub only says when to look (see the
    module's invariants), so nothing is skipped or repeated whatever the timing.
    """

    _PAGE = 200

    def __init__(
        self,
        agent_id: str,
        after: int,
        hub: LedgerHub,
        read: Callable[[Callable[[Transaction], list[SessionEvent]]], list[SessionEvent]],
        *,
        poll_seconds: float = 1.0,
        ephemeral: bool = False,
    ) -> None:
        self.agent_id = agent_id
        self._last = after
        self._hub = hub
        self._read = read
        self._poll = poll_seconds
        self._buffer: deque[SessionEvent] = deque()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        # Ephemeral events go to their own bounded queue, never into the durable cursor.
        self._ephemeral = hub.listen(agent_id) if ephemeral else None

    @property
    def dropped_ephemerals(self) -> int:
        """How many ephemeral events were dropped unread (the subscriber was too slow)."""
        return 0 if self._ephemeral is None else self._ephemeral.dropped

    @property
    def last_sequence(self) -> int:
        """The sequence of the last event handed out (``after`` before the first): the value
        to resubscribe from."""
        return self._last

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called or the system closed."""
        return self._closed.is_set() or self._hub.closed

    def close(self) -> None:
        """Stop: a waiting :meth:`next` returns (``StopIteration``) at its next wake-up."""
        self._closed.set()
        if self._ephemeral is not None:
            self._hub.unlisten(self.agent_id, self._ephemeral)
        self._hub.wake()

    def __iter__(self) -> Iterator[SessionEvent]:
        return self

    def __next__(self) -> SessionEvent:
        return self.next(timeout_seconds=None)

    def next(self, timeout_seconds: float | None = None) -> SessionEvent:
        """The next event, waiting for it to commit.

        Raises:
            TimeoutError: no event within ``timeout_seconds``.
            StopIteration: the subscription or the system was closed.
        """
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        with self._lock:
            # A mark the store did not bear out (an id re-created since) is not waited past
            # again, so an empty read never spins.
            threshold = self._last
            while True:
                if self.closed:
                    raise StopIteration
                # An ephemeral published before the next durable event committed goes first.
                if (early := self._take_ephemeral(self._last)) is not None:
                    return early
                if self._buffer:
                    event = self._buffer.popleft()
                    self._last = event.sequence
                    return event
                if self._fill():
                    continue
                if (late := self._take_ephemeral(None)) is not None:
                    return late
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(
                        f"no event of session {self.agent_id!r} after sequence "
                        f"{self._last} within {timeout_seconds} s"
                    )
                threshold = max(threshold, self._last)
                wait = self._poll if remaining is None else min(self._poll, remaining)
                threshold = max(
                    threshold,
                    self._hub.wait_past(self.agent_id, threshold, wait, self._woken),
                )

    def _woken(self) -> bool:
        """Stop waiting (called under the hub's condition): closed, or an ephemeral came."""
        return self._closed.is_set() or bool(self._ephemeral)

    def _take_ephemeral(self, upto: int | None) -> SessionEvent | None:
        if self._ephemeral is None:
            return None
        return self._hub.take_ephemeral(self._ephemeral, upto)

    def _fill(self) -> bool:
        """Read the next page after the last event handed out; True if it found any."""
        after = self._last

        def page(tx: Transaction) -> list[SessionEvent]:
            return tx.ledger.events(self.agent_id, after, self._PAGE)

        try:
            events = self._read(page)
        except (StoreClosedError, AgentClosedError):
            self._closed.set()
            return False
        self._buffer.extend(events)
        return bool(events)
