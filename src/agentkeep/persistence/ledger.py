"""The session event ledger in the store: its statements, the commit hub, subscriptions.

Invariants:

- An event is appended only inside the transaction of the fact it reports
  (:meth:`LedgerStatements.append_event`); its ``sequence`` is the session's durable tail plus
  one, read and written inside that transaction, so sequences are dense from 1 and never
  reused (the writer is the only writer; a rolled-back append leaves no hole).
- The hub hears of an event only after its COMMIT (an ``after_commit`` callback), and only
  the session's highest sequence: a :class:`Subscription` never trusts a payload from memory,
  it reads every event by sequence from the store. So a notification that is missed (a crash
  between COMMIT and the callback) or coalesced costs at most a wait, never an event: a
  subscriber re-reads the store whenever it wakes, and at least every ``poll`` seconds.
- Ephemeral events (streamed ``text.delta``) are never stored and have no sequence
  (``sequence == 0``): the hub hands each one to the live subscriptions that asked for them
  (``ephemeral=True``), each into its own bounded queue that drops its oldest ephemeral when
  full. They never touch a subscription's durable cursor, so the durable events stay exactly
  once and in order whatever is published; an ephemeral is never replayed.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from itertools import chain
from typing import TYPE_CHECKING, Any

import msgspec

from agentkeep.errors import (
    AgentClosedError,
    EventTooLargeError,
    InputTooLargeError,
    InvalidConfigError,
    StoreClosedError,
)
from agentkeep.persistence.codec import Statements, decode_object, now_ms
from agentkeep.persistence.memo import MISSING, WriterMemo
from agentkeep.persistence.transaction_core import TransactionCore
from agentkeep.types import JSONObject, SessionEvent
from agentkeep.types.ledger import (
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_MAX_INPUT_BYTES,
    MAX_EVENTS_PAGE,
)

_INSERT_EVENTS = (
    "INSERT INTO session_events (agent_id, sequence, type, turn_id, data_json, created_at_ms) "
    "VALUES "
)
_EVENT_ROW = "(?, ?, ?, ?, ?, ?)"
# 6 parameters a row, well under SQLite's 32,766 variables a statement.
_EVENTS_PER_INSERT = 500

if TYPE_CHECKING:
    from agentkeep.persistence.interface import Transaction

#: The most ephemeral events one subscription holds unread; past it the oldest is dropped.
MAX_PENDING_EPHEMERALS = 1000

_encoder = msgspec.json.Encoder(order="sorted")
# The small fields an oversized event keeps (with every ``*_id``): what the fact was.
_IDENTITIES = ("index", "role", "position", "delivery", "reason", "epoch", "is_error", "ran")


def encode_event_data(data: JSONObject) -> str:
    """``data`` as the stored JSON text (canonical key order)."""
    return _encoder.encode(data).decode()


def encode_event_data_value(value: object) -> str:
    """One JSON value as :func:`encode_event_data` writes it inside an object (the same
    encoder, so splicing it into stored text gives the same bytes as encoding the whole)."""
    return _encoder.encode(value).decode()


def check_input_size(
    input: JSONObject, limit: int = DEFAULT_MAX_INPUT_BYTES, *, encoded: str | None = None
) -> None:
    """Refuse an input message whose stored JSON (``encoded``, if already encoded) is over
    ``limit`` bytes: the check acceptance makes, and a client makes before it sends.

    Raises:
        InputTooLargeError: naming its size and the limit.
    """
    size = len((encode_event_data(input) if encoded is None else encoded).encode())
    if size > limit:
        raise InputTooLargeError(size, limit)


def omitted(data: JSONObject, size: int, limit: int) -> JSONObject:
    """What an oversized loop fact's event carries instead of its payload: the identities
    (``*_id``, ``index``, ``role``) and the sizes. The content itself stays readable in the
    transcript (or its archived epoch); only an event's copy is left out."""
    kept = {k: v for k, v in data.items() if k.endswith("_id") or k in _IDENTITIES}
    return {**kept, "omitted": "too_large", "bytes": size, "max_event_bytes": limit}


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

    @property
    def closed(self) -> bool:
        """True once the store closed: every subscription ends."""
        return self._closed

    def committed(self, session_id: str, sequence: int) -> None:
        """An event up to ``sequence`` of ``session_id`` is durable: wake its subscribers."""
        self.committed_marks({session_id: sequence})

    def committed_marks(self, marks: dict[str, int]) -> None:
        """Events up to ``marks[session]`` are durable (one transaction's, announced once
        after its COMMIT): move the marks and wake the waiters, if any wait.

        Skipping the notify when nobody waits loses no wake-up: a waiter counts itself in
        ``_waiting`` and checks the marks under the same lock this method moves them under.
        """
        with self._condition:
            latest = self._latest
            woken: list[Callable[[], None]] = []
            for session_id, sequence in marks.items():
                if sequence > latest.get(session_id, 0):
                    latest[session_id] = sequence
                    watchers = self._watchers.get(session_id)
                    if watchers:
                        woken.extend(watchers.values())
            if self._waiting:
                self._condition.notify_all()
        for callback in woken:
            callback()

    def watch(self, session_id: str, callback: Callable[[], None]) -> Callable[[], None]:
        """Run ``callback`` (from the committing thread: it must not block, e.g.
        ``loop.call_soon_threadsafe``) each time ``session_id``'s mark moves or an ephemeral
        event of it is published, and once when the hub closes; returns the function that
        stops watching. An event loop waits on the hub this way without holding a thread."""
        with self._condition:
            if self._closed:
                closed = True
            else:
                closed = False
                self._next_watch += 1
                key = self._next_watch
                self._watchers.setdefault(session_id, {})[key] = callback
        if closed:
            callback()
            return lambda: None

        def unwatch() -> None:
            with self._condition:
                watchers = self._watchers.get(session_id)
                if watchers is not None:
                    watchers.pop(key, None)
                    if not watchers:
                        del self._watchers[session_id]

        return unwatch

    def wait_past(
        self,
        session_id: str,
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
                    lambda: self._closed or stop() or self._latest.get(session_id, 0) > after,
                    timeout_seconds,
                )
            finally:
                self._waiting -= 1
            return self._latest.get(session_id, 0)

    def publish(self, session_id: str, type: str, data: JSONObject, turn_id: str | None) -> None:
        """Hand an ephemeral event to the session's live subscriptions that want them; it is
        not stored, has no sequence and is never replayed (nobody listening: it is gone)."""
        with self._condition:
            queues = self._ephemeral.get(session_id)
            if not queues:
                return
            event = SessionEvent(
                session_id=session_id,
                sequence=0,
                type=type,
                data=data,
                created_at_ms=now_ms(),
                turn_id=turn_id,
            )
            mark = self._latest.get(session_id, 0)
            for queue in queues:
                queue.put(mark, event)
            self._condition.notify_all()
            woken = list(self._watchers.get(session_id, {}).values())
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

    def listen(self, session_id: str) -> EphemeralQueue:
        """A new bounded queue receiving the session's ephemeral events from now on."""
        queue = EphemeralQueue()
        with self._condition:
            self._ephemeral.setdefault(session_id, []).append(queue)
        return queue

    def unlisten(self, session_id: str, queue: EphemeralQueue) -> None:
        """Stop delivering the session's ephemeral events to ``queue``."""
        with self._condition:
            queues = self._ephemeral.get(session_id, [])
            if queue in queues:
                queues.remove(queue)
            if not queues:
                self._ephemeral.pop(session_id, None)

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


class LedgerStatements(TransactionCore):
    """The ledger's statements over the enclosing transaction (a mixin of
    ``SqliteTransaction``, like ``ArchivedHistory``)."""

    _ledger: LedgerHub | None
    # The writer's memo (set by SqliteTransaction): each session's last event sequence is
    # read once, then advanced by every append (persistence/memo.py states the invariant).
    _memo: WriterMemo
    _statements: Statements
    # Rows appended in a writer's work item and not yet written (see append_event).
    _pending_events: list[tuple[Any, ...]]
    # Each session's last event appended by this transaction, announced to the hub by one
    # after-commit callback (registered with the first event). None: no event yet (a class
    # default, so the transaction's own __init__ need not know of it).
    _event_marks: dict[str, int] | None = None

    # Provided by SqliteTransaction.
    def after_commit(self, callback: Callable[[], None]) -> None:
        raise NotImplementedError

    @property
    def max_event_bytes(self) -> int:
        return DEFAULT_MAX_EVENT_BYTES if self._ledger is None else self._ledger.max_event_bytes

    def check_input_size(self, input: JSONObject, *, encoded: str | None = None) -> None:
        limit = DEFAULT_MAX_INPUT_BYTES if self._ledger is None else self._ledger.max_input_bytes
        check_input_size(input, limit, encoded=encoded)

    def check_event_size(self, what: str, data: JSONObject, *, encoded: str | None = None) -> None:
        size = len((encode_event_data(data) if encoded is None else encoded).encode())
        if size > self.max_event_bytes:
            raise EventTooLargeError(what, size, self.max_event_bytes)

    def append_event(
        self,
        agent_id: str,
        type: str,
        data: JSONObject,
        *,
        turn_id: str | None = None,
        fit: bool = False,
        encoded: str | None = None,
    ) -> int:
        self._check(write=True)
        text = encode_event_data(data) if encoded is None else encoded
        size = len(text.encode())
        if size > self.max_event_bytes:
            if not fit:
                raise EventTooLargeError(f"A {type!r} event", size, self.max_event_bytes)
            text = encode_event_data(omitted(data, size, self.max_event_bytes))
        sequence = 1 + self.last_event_sequence(agent_id)
        row = (agent_id, sequence, type, turn_id, text, now_ms())
        if self._memo.in_group:
            # In a writer's work item: buffered, and written with the item's other events by
            # one statement before any statement that could see them runs (a read, raw SQL,
            # the item's RELEASE; see Statements.flush). A failed write keeps the rows
            # buffered, so the remembered tail stays the store's tail plus the buffer.
            self._pending_events.append(row)
            self._statements.flush = self._flush_events
        else:
            self._write(_INSERT_EVENTS + _EVENT_ROW, row)
        self._memo.put(("event_tail", agent_id), sequence)
        hub = self._ledger
        if hub is not None:
            marks = self._event_marks
            if marks is None:
                marks = self._event_marks = {}
                self.after_commit(lambda: hub.committed_marks(marks))
            marks[agent_id] = sequence
        return sequence

    def _flush_events(self) -> None:
        """Write the buffered events (a multi-row INSERT per chunk); rows stay buffered
        until their statement ran."""
        pending = self._pending_events
        while pending:
            chunk = pending[:_EVENTS_PER_INSERT]
            sql = _INSERT_EVENTS + ", ".join([_EVENT_ROW] * len(chunk))
            self._statements.write(sql, tuple(chain.from_iterable(chunk)))
            del pending[: len(chunk)]
        self._statements.flush = None

    def last_event_sequence(self, agent_id: str) -> int:
        # Invariant: every event written goes through append_event (any other write makes the
        # memo forget), so after the first read the remembered tail is the store's max.
        self._check(write=False)
        key = ("event_tail", agent_id)
        cached = self._memo.get(key)
        if cached is not MISSING:
            return int(cached)
        last = int(
            self._one(
                "SELECT coalesce(max(sequence), 0) FROM session_events WHERE agent_id = ?",
                (agent_id,),
            )
        )
        self._memo.put(key, last)
        return last

    def noted_event_sequence(self, agent_id: str, sequence: int) -> None:
        """Tell this transaction an event ``sequence`` of ``agent_id`` was written past
        :meth:`append_event` (raw SQL, e.g. a chaos mutant), so its remembered tail stays
        true (raw SQL made the memo forget everything already; this forgets the tail again)."""
        del sequence
        self._memo.forget(("event_tail", agent_id))

    def events(self, agent_id: str, after: int = 0, limit: int = 100) -> list[SessionEvent]:
        cursor = self._read(
            "SELECT sequence, type, turn_id, data_json, created_at_ms FROM session_events "
            "WHERE agent_id = ? AND sequence > ? ORDER BY sequence LIMIT ?",
            (agent_id, after, limit),
        )
        rows: list[Any] = cursor.fetchall()
        return [
            SessionEvent(
                session_id=agent_id,
                sequence=int(sequence),
                type=str(type_),
                turn_id=None if turn_id is None else str(turn_id),
                data=decode_object(data_json),
                created_at_ms=int(created_at_ms),
            )
            for sequence, type_, turn_id, data_json, created_at_ms in rows
        ]

    def session_known(self, agent_id: str) -> bool:
        """True if ``agent_id`` was ever created and not wiped (deleted agents count: their
        ledger stays readable)."""
        return self._one("SELECT 1 FROM agents WHERE id = ?", (agent_id,)) is not None


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
        session_id: str,
        after: int,
        hub: LedgerHub,
        read: Callable[[Callable[[Transaction], list[SessionEvent]]], list[SessionEvent]],
        *,
        poll_seconds: float = 1.0,
        ephemeral: bool = False,
    ) -> None:
        self.session_id = session_id
        self._last = after
        self._hub = hub
        self._read = read
        self._poll = poll_seconds
        self._buffer: deque[SessionEvent] = deque()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        # Ephemeral events go to their own bounded queue, never into the durable cursor.
        self._ephemeral = hub.listen(session_id) if ephemeral else None

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
            self._hub.unlisten(self.session_id, self._ephemeral)
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
                        f"no event of session {self.session_id!r} after sequence "
                        f"{self._last} within {timeout_seconds} s"
                    )
                threshold = max(threshold, self._last)
                wait = self._poll if remaining is None else min(self._poll, remaining)
                threshold = max(
                    threshold,
                    self._hub.wait_past(self.session_id, threshold, wait, self._woken),
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
            return tx.events(self.session_id, after, self._PAGE)

        try:
            events = self._read(page)
        except (StoreClosedError, AgentClosedError):
            self._closed.set()
            return False
        self._buffer.extend(events)
        return bool(events)
