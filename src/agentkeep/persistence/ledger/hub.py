"""The ledger's post-commit hub: per-session high-water marks of committed events, and
what subscribers wait on (docs/ledger.md).

Invariants:

- A mark moves only after its events' COMMIT (the writer calls :meth:`LedgerHub.committed_marks`
  from an after-commit callback), and the hub carries no payload: a subscriber reads every
  event by sequence from the store. So a notification that is missed (a crash between COMMIT
  and the callback) or coalesced costs at most a wait, never an event.
- Ephemeral events (streamed ``text.delta``) are never stored and have no sequence
  (``sequence == 0``): the hub hands each one to the live subscriptions that asked for them,
  each into its own bounded :class:`EphemeralQueue` that drops its oldest ephemeral when full.
  They never touch a subscription's durable cursor, and an ephemeral is never replayed.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from agentkeep.errors import InvalidConfigError
from agentkeep.persistence.codec import now_ms
from agentkeep.types import JSONObject, SessionEvent
from agentkeep.types.ledger import DEFAULT_MAX_EVENT_BYTES, DEFAULT_MAX_INPUT_BYTES

__all__ = ["MAX_PENDING_EPHEMERALS", "EphemeralQueue", "LedgerHub"]

#: The most ephemeral events one subscription holds unread; past it the oldest is dropped.
MAX_PENDING_EPHEMERALS = 1000


class EphemeralQueue:
    """One subscription's unread ephemeral events, bounded: when full, the oldest is dropped
    (and counted), never a durable event. Guarded by the hub's condition."""

    def __init__(self, limit: int = MAX_PENDING_EPHEMERALS) -> None:
        # (the session's committed mark when it was published, the event)
        self._items: deque[tuple[int, SessionEvent]] = deque(maxlen=limit)
        self.dropped = 0

    def put(self, mark: int, event: SessionEvent) -> None:
        if len(self._items) == self._items.maxlen:
            self.dropped += 1
        self._items.append((mark, event))

    def peek_mark(self) -> int | None:
        return self._items[0][0] if self._items else None

    def pop(self) -> SessionEvent | None:
        return self._items.popleft()[1] if self._items else None

    def __bool__(self) -> bool:
        return bool(self._items)


class LedgerHub:
    """Per-session high-water marks of committed events, and the condition subscribers wait
    on. The writer calls :meth:`committed` after COMMIT; nothing else moves a mark."""

    def __init__(
        self,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES,
    ) -> None:
        for name, value in (
            ("max_event_bytes", max_event_bytes),
            ("max_input_bytes", max_input_bytes),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 256:
                raise InvalidConfigError(
                    f"{name} must be an integer of at least 256, got {value!r}"
                )
        self.max_event_bytes = max_event_bytes
        self.max_input_bytes = max_input_bytes
        #: The store's clock (milliseconds), which stamps the ephemeral events it publishes
        #: from any thread; the store sets it when it was opened with one.
        self.clock: Callable[[], int] = now_ms
        self._condition = threading.Condition()
        self._latest: dict[str, int] = {}
        # Threads inside wait_past (guarded by _condition): committed_marks notifies only
        # when some wait.
        self._waiting = 0
        self._closed = False
        # Per session: the ephemeral queues of its live subscriptions that want them.
        self._ephemeral: dict[str, list[EphemeralQueue]] = {}
        # Per session: callbacks run when its mark moves (and once at close); see watch().
        self._watchers: dict[str, dict[int, Callable[[], None]]] = {}
        self._next_watch = 0
        #: Called (outside the lock, on the watching thread; it must not block) with
        #: ``(session, True)`` when a session gets its first watcher and ``(session, False)``
        #: when it loses its last: how a store that hears other processes' commits learns
        #: which sessions to hear (None: nobody needs to know).
        self.on_follow: Callable[[str, bool], None] | None = None

    @property
    def closed(self) -> bool:
        """True once the store closed: every subscription ends."""
        return self._closed

    def committed(self, agent_id: str, sequence: int) -> None:
        """An event up to ``sequence`` of ``agent_id`` is durable: wake its subscribers."""
        self.committed_marks({agent_id: sequence})

    def committed_marks(self, marks: dict[str, int]) -> None:
        """Events up to ``marks[session]`` are durable (one transaction's, announced once
        after its COMMIT): move the marks and wake the waiters, if any wait.

        Skipping the notify when nobody waits loses no wake-up: a waiter counts itself in
        ``_waiting`` and checks the marks under the same lock this method moves them under.
        """
        with self._condition:
            latest = self._latest
            woken: list[Callable[[], None]] = []
            for agent_id, sequence in marks.items():
                if sequence > latest.get(agent_id, 0):
                    latest[agent_id] = sequence
                    watchers = self._watchers.get(agent_id)
                    if watchers:
                        woken.extend(watchers.values())
            if self._waiting:
                self._condition.notify_all()
        for callback in woken:
            callback()

    def committed_elsewhere(self, agent_id: str, sequence: int) -> None:
        """Another process committed events of ``agent_id`` up to ``sequence`` (a store's
        notification, delivered only after that COMMIT): move the mark and wake as
        :meth:`committed_marks` does, but only while something here watches or waits (a
        later reader reads the store before it waits, so a mark not kept costs nothing; the
        marks of sessions nobody here follows are not accumulated)."""
        with self._condition:
            if agent_id not in self._watchers and not self._waiting:
                return
        self.committed_marks({agent_id: sequence})

    def wake_watchers(self, which: Callable[[str], bool] = lambda agent_id: True) -> None:
        """Run every watcher of the sessions ``which`` selects once, and wake every waiter:
        announcements may have been lost (the notifications from other processes did not
        reach this process for a while), so each re-reads."""
        with self._condition:
            watchers = [
                cb
                for agent_id, each in self._watchers.items()
                if which(agent_id)
                for cb in each.values()
            ]
            self._condition.notify_all()
        for callback in watchers:
            callback()

    def watch(self, agent_id: str, callback: Callable[[], None]) -> Callable[[], None]:
        """Run ``callback`` (from the committing thread: it must not block, e.g.
        ``loop.call_soon_threadsafe``) each time ``agent_id``'s mark moves or an ephemeral
        event of it is published, and once when the hub closes; returns the function that
        stops watching. An event loop waits on the hub this way without holding a thread."""
        with self._condition:
            if self._closed:
                closed, first = True, False
            else:
                closed = False
                self._next_watch += 1
                key = self._next_watch
                first = agent_id not in self._watchers
                self._watchers.setdefault(agent_id, {})[key] = callback
        if closed:
            callback()
            return lambda: None
        follow = self.on_follow
        if first and follow is not None:
            follow(agent_id, True)

        def unwatch() -> None:
            last = False
            with self._condition:
                watchers = self._watchers.get(agent_id)
                if watchers is not None and key in watchers:
                    del watchers[key]
                    if not watchers:
                        del self._watchers[agent_id]
                        last = True
            if last and follow is not None:
                follow(agent_id, False)

        return unwatch

    def wait_past(
        self,
        agent_id: str,
        after: int,
        timeout_seconds: float | None,
        stop: Callable[[], bool] = lambda: False,
    ) -> int:
        """Return once an event past ``after`` was announced, the hub closed, ``stop()``
        holds, or the timeout passed; returns the session's mark (the caller re-reads the
        store in every case)."""
        with self._condition:
            self._waiting += 1
            try:
                self._condition.wait_for(
                    lambda: self._closed or stop() or self._latest.get(agent_id, 0) > after,
                    timeout_seconds,
                )
            finally:
                self._waiting -= 1
            return self._latest.get(agent_id, 0)

    def publish(self, agent_id: str, type: str, data: JSONObject, turn_id: str | None) -> None:
        """Hand an ephemeral event to the session's live subscriptions that want them; it is
        not stored, has no sequence and is never replayed (nobody listening: it is gone)."""
        with self._condition:
            queues = self._ephemeral.get(agent_id)
            if not queues:
                return
            event = SessionEvent(
                session_id=agent_id,
                sequence=0,
                type=type,
                data=data,
                created_at_ms=self.clock(),
                turn_id=turn_id,
            )
            mark = self._latest.get(agent_id, 0)
            for queue in queues:
                queue.put(mark, event)
            self._condition.notify_all()
            woken = list(self._watchers.get(agent_id, {}).values())
        for callback in woken:
            callback()

    def take_ephemeral(self, queue: EphemeralQueue, upto: int | None) -> SessionEvent | None:
        """The oldest unread ephemeral of ``queue``; with ``upto``, only one published when
        the session's committed mark was at most ``upto`` (so it goes out before the durable
        events committed after it)."""
        with self._condition:
            mark = queue.peek_mark()
            if mark is None or (upto is not None and mark > upto):
                return None
            return queue.pop()

    def listen(self, agent_id: str) -> EphemeralQueue:
        """A new bounded queue receiving the session's ephemeral events from now on."""
        queue = EphemeralQueue()
        with self._condition:
            self._ephemeral.setdefault(agent_id, []).append(queue)
        return queue

    def unlisten(self, agent_id: str, queue: EphemeralQueue) -> None:
        """Stop delivering the session's ephemeral events to ``queue``."""
        with self._condition:
            queues = self._ephemeral.get(agent_id, [])
            if queue in queues:
                queues.remove(queue)
            if not queues:
                self._ephemeral.pop(agent_id, None)

    def wake(self) -> None:
        """Wake every waiter to re-check its own stop condition."""
        with self._condition:
            self._condition.notify_all()

    def close(self) -> None:
        """End every subscription (the store is closing)."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()
            watchers = [cb for each in self._watchers.values() for cb in each.values()]
            self._watchers.clear()
        for callback in watchers:
            callback()
