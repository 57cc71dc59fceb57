"""``tx.ledger``: the session event ledger's statements, inside one transaction
(docs/ledger.md); the hub that hears of committed events is :mod:`.hub`, a reader's view
:mod:`.subscription`.

Invariants:

- An event is appended only inside the transaction of the fact it reports
  (:meth:`LedgerStatements.append`); its ``sequence`` is the session's durable tail plus
  one, read and written inside that transaction, so sequences are dense from 1 and never
  reused (the writer is the only writer; a rolled-back append leaves no hole).
- The hub hears of an event only after its COMMIT (an after-commit callback registered with
  the transaction's first event), and only each session's highest sequence.
- The writer's memo remembers each session's last sequence (``("event_tail", id)``), read
  once and then advanced by every append (persistence/memo.py states the invariant).
"""

from __future__ import annotations

from itertools import chain
from typing import Any

import msgspec

from agentkeep.errors import EventTooLargeError, InputTooLargeError
from agentkeep.persistence.codec import decode_object, now_ms
from agentkeep.persistence.executor import Executor, TableStatements
from agentkeep.persistence.ledger.hub import LedgerHub
from agentkeep.persistence.memo import MISSING
from agentkeep.types import JSONObject, SessionEvent
from agentkeep.types.ledger import DEFAULT_MAX_EVENT_BYTES, DEFAULT_MAX_INPUT_BYTES

__all__ = [
    "LedgerStatements",
    "check_input_size",
    "encode_event_data",
    "encode_event_data_value",
    "omitted",
]

_INSERT_EVENTS = (
    "INSERT INTO session_events (agent_id, sequence, type, turn_id, data_json, created_at_ms) "
    "VALUES "
)
_EVENT_ROW = "(?, ?, ?, ?, ?, ?)"
# 6 parameters a row, well under SQLite's 32,766 variables a statement.
_EVENTS_PER_INSERT = 500

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


class LedgerStatements(TableStatements):
    """The ledger's statements over the enclosing transaction (see the module).

    Args:
        executor: The transaction's executor.
        hub: The hub told (after COMMIT) of each event appended, and the event size limit
            (None: the default limit, nobody told).
    """

    def __init__(self, executor: Executor, hub: LedgerHub | None = None) -> None:
        super().__init__(executor)
        self._hub = hub
        # Rows appended in a writer's work item and not yet written (see append).
        self._pending: list[tuple[Any, ...]] = []
        # Each session's last event appended by this transaction, announced to the hub by
        # one after-commit callback (registered with the first event). None: no event yet.
        self._event_marks: dict[str, int] | None = None

    @property
    def max_event_bytes(self) -> int:
        """The bound on one event's encoded data."""
        return DEFAULT_MAX_EVENT_BYTES if self._hub is None else self._hub.max_event_bytes

    def check_input_size(self, input: JSONObject, *, encoded: str | None = None) -> None:
        """Raise ``InputTooLargeError`` if an input message (its JSON) is over the system's
        ``max_input_bytes``; writes nothing. ``encoded``: ``input``'s stored JSON, if the
        caller has it already."""
        limit = DEFAULT_MAX_INPUT_BYTES if self._hub is None else self._hub.max_input_bytes
        check_input_size(input, limit, encoded=encoded)

    def check_event_size(self, what: str, data: JSONObject, *, encoded: str | None = None) -> None:
        """Raise ``EventTooLargeError`` (naming ``what`` and the limit) if ``data`` would not
        fit in one event; writes nothing. ``encoded``: ``data``'s stored JSON, if known."""
        size = len((encode_event_data(data) if encoded is None else encoded).encode())
        if size > self.max_event_bytes:
            raise EventTooLargeError(what, size, self.max_event_bytes)

    def append(
        self,
        agent_id: str,
        type: str,
        data: JSONObject,
        *,
        turn_id: str | None = None,
        fit: bool = False,
        encoded: str | None = None,
    ) -> int:
        """Append one event in this transaction; returns its sequence (the session's tail
        plus one). Oversized ``data`` raises ``EventTooLargeError``, or with ``fit`` is
        replaced by its identities and sizes (a loop fact that cannot be refused).
        ``encoded``: ``data``'s stored JSON (:func:`encode_event_data`), if the caller has it
        already; it must be exactly that text."""
        self._check(write=True)
        text = encode_event_data(data) if encoded is None else encoded
        size = len(text.encode())
        if size > self.max_event_bytes:
            if not fit:
                raise EventTooLargeError(f"A {type!r} event", size, self.max_event_bytes)
            text = encode_event_data(omitted(data, size, self.max_event_bytes))
        sequence = 1 + self.last_sequence(agent_id)
        row = (agent_id, sequence, type, turn_id, text, now_ms())
        if self._memo.in_group:
            # In a writer's work item: buffered, and written with the item's other events by
            # one statement before any statement that could see them runs (a read, raw SQL,
            # the item's RELEASE; see Statements.flush). A failed write keeps the rows
            # buffered, so the remembered tail stays the store's tail plus the buffer.
            self._pending.append(row)
            self._x.statements.flush = self._flush
        else:
            self._send(_INSERT_EVENTS + _EVENT_ROW, row)
        self._memo.put(("event_tail", agent_id), sequence)
        announced = self._x.statements.announced
        if announced is not None:
            announced[agent_id] = sequence
        hub = self._hub
        if hub is not None:
            marks = self._event_marks
            if marks is None:
                marks = self._event_marks = {}
                self._x.after_commit(lambda: hub.committed_marks(marks))
            marks[agent_id] = sequence
        return sequence

    def _flush(self) -> None:
        """Write the buffered events (a multi-row INSERT per chunk); rows stay buffered
        until their statement ran."""
        pending = self._pending
        statements = self._x.statements
        while pending:
            chunk = pending[:_EVENTS_PER_INSERT]
            sql = _INSERT_EVENTS + ", ".join([_EVENT_ROW] * len(chunk))
            statements.send(sql, tuple(chain.from_iterable(chunk)))
            del pending[: len(chunk)]
        statements.flush = None

    def discard(self) -> None:
        """Drop the buffered events (the transaction ended): any left over belong to a work
        item that failed, whose savepoint is rolled back."""
        self._pending.clear()
        statements = self._x.statements
        if statements.flush == self._flush:
            statements.flush = None

    def last_sequence(self, agent_id: str) -> int:
        """The session's highest sequence (0 before its first event)."""
        # Invariant: every event written goes through append (any other write makes the
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

    def noted_sequence(self, agent_id: str, sequence: int) -> None:
        """Tell this transaction an event ``sequence`` of ``agent_id`` was written past
        :meth:`append` (raw SQL, e.g. a chaos mutant), so its remembered tail stays
        true (raw SQL made the memo forget everything already; this forgets the tail again)."""
        del sequence
        self._memo.forget(("event_tail", agent_id))

    def events(self, agent_id: str, after: int = 0, limit: int = 100) -> list[SessionEvent]:
        """Up to ``limit`` events with a sequence above ``after``, in order."""
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

    def agent_known(self, agent_id: str) -> bool:
        """True if ``agent_id`` was ever created and not wiped (deleted agents count: their
        ledger stays readable)."""
        return self._one("SELECT 1 FROM agents WHERE id = ?", (agent_id,)) is not None
