"""Turns in the store: their statements, inside the enclosing transaction (docs/turns.md).

Invariants:

- A turn is opened in the transaction that accepts its input, with its ``turn.queued`` event
  (the caller appends the input's ``message.accepted`` event in the same transaction).
- An idempotency key names one input of one session forever: :meth:`TurnStatements.open_turn`
  returns the existing turn for a repeated key (and refuses a repeated key with another
  input), so a key never opens two turns and never runs a driver twice.
- Every status move is checked against :data:`~agentkeep.model.turns.TRANSITIONS` and appends
  its ``turn.<status>`` event in the same transaction; the schema's triggers refuse a change
  of a terminal status whatever the caller does.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left
from collections.abc import Callable
from operator import attrgetter
from typing import Any

import msgspec

from agentkeep.errors import IdempotencyConflictError, TurnStateError
from agentkeep.model import JSONObject, new_id
from agentkeep.model.turns import (
    LIVE_STATUSES,
    TERMINAL_STATUSES,
    TRANSITIONS,
    TurnDelivery,
    TurnFailure,
    TurnRecord,
    TurnStatus,
    turn_event_type,
)
from agentkeep.persistence.codec import decode_object, now_ms
from agentkeep.persistence.ledger import encode_event_data, encode_event_data_value
from agentkeep.persistence.memo import MISSING, WriterMemo
from agentkeep.persistence.transaction_core import TransactionCore

_COLUMNS = (
    "agent_id, number, id, idempotency_key, driver, status, input_json, message_id, "
    "result_json, error_json, created_at_ms, started_at_ms, completed_at_ms"
)
_LIVE = "('queued', 'running', 'cancelling')"
#: A live turn that started: what a step's answer, a failure or an abort moves.
_STARTED = frozenset({"running", "cancelling"})
_message_id = attrgetter("id")
_failure_decoder = msgspec.json.Decoder(TurnFailure)
_encoder = msgspec.json.Encoder()


def input_hash(delivery: TurnDelivery, input: JSONObject, *, encoded: str | None = None) -> str:
    """What makes two inputs "the same" for an idempotency key: the delivery and the message
    (canonical JSON), so a retried send matches and a different one is refused.

    ``encoded``: ``input``'s stored JSON (:func:`encode_event_data`), if the caller has it;
    the hashed text is the same either way, as the canonical (sorted) encoding of
    ``{"delivery": …, "input": …}`` is exactly ``{"delivery":<delivery>,"input":<input>}``.
    """
    if encoded is None:
        text = encode_event_data({"delivery": delivery, "input": input})
    else:
        text = f'{{"delivery":{encode_event_data_value(delivery)},"input":{encoded}}}'
    return hashlib.sha256(text.encode()).hexdigest()


def _turn(row: tuple[Any, ...]) -> TurnRecord:
    (
        agent_id,
        number,
        turn_id,
        key,
        driver,
        status,
        input_json,
        message_id,
        result_json,
        error_json,
        created,
        started,
        completed,
    ) = row
    return TurnRecord(
        id=str(turn_id),
        session_id=str(agent_id),
        number=int(number),
        idempotency_key=str(key),
        driver=str(driver),
        status=status,
        input=decode_object(input_json),
        message_id=None if message_id is None else str(message_id),
        result=None if result_json is None else decode_object(result_json),
        error=None if error_json is None else _failure_decoder.decode(error_json),
        created_at_ms=int(created),
        started_at_ms=None if started is None else int(started),
        completed_at_ms=None if completed is None else int(completed),
    )


class TurnStatements(TransactionCore):
    """The turns' statements over the enclosing transaction (a mixin of
    ``SqliteTransaction``, like ``LedgerStatements``)."""

    # The writer's memo (set by SqliteTransaction; persistence/memo.py states the invariant).
    # Per session: its last turn number ("turn_tail"), its running turn ("running_turn"),
    # its live turns' ids in number order ("live_turns"), its started ones — running or
    # cancelling — in number order ("started_turns": what a step's answer moves, so a backlog
    # of queued turns costs it nothing), the turn of a message id ("message_turn"); per turn:
    # its row ("turn"). Only open_turn and move_turn write turns and turn_inputs, and they
    # keep these true; a finished turn's row is remembered only until its transaction ends
    # (it is rarely read again).
    _memo: WriterMemo

    # Provided by SqliteTransaction / LedgerStatements.
    def append_event(
        self,
        agent_id: str,
        type: str,
        data: JSONObject,
        *,
        turn_id: str | None = None,
        fit: bool = False,
    ) -> int:
        raise NotImplementedError

    # -- reads -----------------------------------------------------------------------------
    def _turns(self, where: str, params: tuple[Any, ...]) -> list[TurnRecord]:
        cursor = self._read(f"SELECT {_COLUMNS} FROM turns WHERE {where}", params)
        rows: list[tuple[Any, ...]] = cursor.fetchall()
        turns = [_turn(row) for row in rows]
        for turn in turns:
            self._remember_turn(turn)
        return turns

    def _remember_turn(self, turn: TurnRecord) -> None:
        self._memo.put(
            ("turn", turn.session_id, turn.id), turn, transient=turn.status in TERMINAL_STATUSES
        )

    def read_turn(self, agent_id: str, turn_id: str) -> TurnRecord | None:
        self._check(write=False)
        known: TurnRecord | None = self._memo.get(("turn", agent_id, turn_id))
        if known is not MISSING:
            return known
        found = self._turns("agent_id = ? AND id = ?", (agent_id, turn_id))
        return found[0] if found else None

    def list_turns(self, agent_id: str, after: int = 0, limit: int = 100) -> list[TurnRecord]:
        return self._turns(
            "agent_id = ? AND number > ? ORDER BY number LIMIT ?", (agent_id, after, limit)
        )

    def live_turns(self, agent_id: str) -> list[TurnRecord]:
        self._check(write=False)
        remembered = self._remembered_live(agent_id)
        if remembered is not None:
            return remembered
        live = self._turns(f"agent_id = ? AND status IN {_LIVE} ORDER BY number", (agent_id,))
        self._memo.put(("live_turns", agent_id), tuple(turn.id for turn in live))
        # The same answers started_turns and running_turn_id would read.
        started = tuple(turn.id for turn in live if turn.status != "queued")
        self._memo.put(("started_turns", agent_id), started)
        self._memo.put(("running_turn", agent_id), started[-1] if started else None)
        return live

    def started_turns(self, agent_id: str) -> list[TurnRecord]:
        """The session's running and cancelling turns, in number order: what an answer, a
        failure or an abort moves. Its cost does not grow with the session's queued turns."""
        self._check(write=False)
        key = ("started_turns", agent_id)
        ids: tuple[str, ...] = self._memo.get(key)
        if ids is not MISSING:
            rows = [self._memo.get(("turn", agent_id, turn_id)) for turn_id in ids]
            if not any(row is MISSING for row in rows):
                return rows
        started = self._turns(
            f"agent_id = ? AND status IN {_LIVE} AND status != 'queued' ORDER BY number",
            (agent_id,),
        )
        self._memo.put(key, tuple(turn.id for turn in started))
        return started

    def _remembered_live(self, agent_id: str) -> list[TurnRecord] | None:
        """The session's live turns by number if the memo holds them all, else None."""
        ids: tuple[str, ...] = self._memo.get(("live_turns", agent_id))
        if ids is MISSING:
            return None
        rows = [self._memo.get(("turn", agent_id, turn_id)) for turn_id in ids]
        return None if MISSING in rows else rows

    def all_live_turns(self) -> list[TurnRecord]:
        return self._turns(f"status IN {_LIVE} ORDER BY agent_id, number", ())

    def running_turn_id(self, agent_id: str) -> str | None:
        """The session's latest running (or cancelling) turn: the one a loop fact belongs to
        and a steer joins; None between turns."""
        self._check(write=False)
        key = ("running_turn", agent_id)
        known: str | None = self._memo.get(key)
        if known is not MISSING:
            return known
        started = self._memo.get(("started_turns", agent_id))
        if started is not MISSING:  # the same answer, from the remembered started turns
            running = started[-1] if started else None
        else:
            found = self._one(
                f"SELECT id FROM turns WHERE agent_id = ? AND status IN {_LIVE} "
                "AND status != 'queued' ORDER BY number DESC LIMIT 1",
                (agent_id,),
            )
            running = None if found is None else str(found)
        self._memo.put(key, running)
        return running

    def turn_of_message(self, agent_id: str, message_id: str) -> TurnRecord | None:
        """The turn the latest input with this message id belongs to (message ids can be
        reused once compaction releases them; keys and turns never are)."""
        self._check(write=False)
        key = ("message_turn", agent_id, message_id)
        turn_id: str | None = self._memo.get(key)
        if turn_id is not MISSING:
            return None if turn_id is None else self.read_turn(agent_id, turn_id)
        found = self._turns(
            "agent_id = ?1 AND id = (SELECT turn_id FROM turn_inputs WHERE agent_id = ?1 "
            "AND message_id = ?2 ORDER BY rowid DESC LIMIT 1)",
            (agent_id, message_id),
        )
        self._memo.put(key, found[0].id if found else None)
        return found[0] if found else None

    def turn_message_ids(self, agent_id: str, turn_id: str) -> list[str]:
        """The message ids of the turn's inputs, in acceptance order."""
        cursor = self._read(
            "SELECT message_id FROM turn_inputs WHERE agent_id = ? AND turn_id = ? "
            "AND message_id IS NOT NULL ORDER BY rowid",
            (agent_id, turn_id),
        )
        return [str(row[0]) for row in cursor.fetchall()]

    def turn_inputs_queued(self, agent_id: str, turn_id: str) -> bool:
        """True while any input of the turn is still waiting in a queue."""
        self._check(write=False)
        ids: tuple[str, ...] = self._memo.get(("turn_messages", agent_id, turn_id))
        queued: tuple[Any, ...] = self._memo.get(("queue", agent_id))
        if ids is not MISSING and queued is not MISSING:
            # The same join, over the remembered inputs' message ids and queue: a C-level
            # pass (a backlog makes the queue long, and this is asked at every answer).
            return not set(ids).isdisjoint(map(_message_id, queued))
        return (
            self._one(
                "SELECT 1 FROM turn_inputs AS i JOIN queue AS q "
                "ON q.agent_id = i.agent_id AND q.message_id = i.message_id "
                "WHERE i.agent_id = ? AND i.turn_id = ? LIMIT 1",
                (agent_id, turn_id),
            )
            is not None
        )

    def turn_of_key(
        self, agent_id: str, key: str, delivery: TurnDelivery, input: JSONObject
    ) -> TurnRecord | None:
        """The turn an earlier input with ``key`` opened or joined, or None if the key is new.

        Raises:
            IdempotencyConflictError: the key was used by a different input.
        """
        found = self._read(
            "SELECT turn_id, input_hash FROM turn_inputs "
            "WHERE agent_id = ? AND idempotency_key = ?",
            (agent_id, key),
        ).fetchall()
        if not found:
            return None
        turn_id, known = found[0]
        if known != input_hash(delivery, input):
            raise IdempotencyConflictError(agent_id, key)
        return self.read_turn(agent_id, str(turn_id))

    def session_archived(self, agent_id: str) -> bool:
        """True once the session was archived (it takes no new input)."""
        # ``sessions`` is written only by raw SQL (sessions.tables), which makes the memo
        # forget everything, and by the agents cascade (create_agent forgets the agent).
        self._check(write=False)
        key = ("archived", agent_id)
        known: bool = self._memo.get(key)
        if known is MISSING:
            known = (
                self._one(
                    "SELECT 1 FROM sessions WHERE agent_id = ? AND archived_at_ms IS NOT NULL",
                    (agent_id,),
                )
                is not None
            )
            self._memo.put(key, known)
        return known

    # -- writes ----------------------------------------------------------------------------
    def open_turn(
        self,
        agent_id: str,
        *,
        key: str | None,
        driver: str,
        delivery: TurnDelivery,
        input: JSONObject,
        message_id: str | None,
        input_json: str | None = None,
    ) -> tuple[TurnRecord, bool]:
        """Open a turn for an accepted input (or join the running one, for a steer); returns
        ``(turn, new)``. ``new`` is False when ``key`` was already used by the same input:
        the turn it opened or joined comes back and nothing is written. ``input_json``:
        ``input``'s stored JSON (:func:`encode_event_data`), if the caller encoded it already.

        Raises:
            IdempotencyConflictError: ``key`` was used by a different input.
        """
        self._check(write=True)
        if input_json is None:
            input_json = encode_event_data(input)
        digest = input_hash(delivery, input, encoded=input_json)
        if key is not None and (known := self.turn_of_key(agent_id, key, delivery, input)):
            return known, False
        now = now_ms()
        key = key if key is not None else new_id()
        joined = self.running_turn_id(agent_id) if delivery == "steer" else None
        if joined is not None:
            self._write(
                "INSERT INTO turn_inputs (agent_id, idempotency_key, turn_id, delivery, "
                "input_hash, message_id) VALUES (?, ?, ?, ?, ?, ?)",
                (agent_id, key, joined, delivery, digest, message_id),
            )
            if message_id is not None:
                self._memo.put(("message_turn", agent_id, message_id), joined)
                ids = self._memo.get(("turn_messages", agent_id, joined))
                if ids is not MISSING:
                    self._memo.put(("turn_messages", agent_id, joined), (*ids, message_id))
            turn = self.read_turn(agent_id, joined)
            assert turn is not None  # just found running
            return turn, True
        last = self._memo.get(("turn_tail", agent_id))
        if last is MISSING:
            last = self._one(
                "SELECT coalesce(max(number), 0) FROM turns WHERE agent_id = ?", (agent_id,)
            )
        number = 1 + int(last)
        turn_id = new_id()
        self._write(
            f"INSERT INTO turns ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, 'queued', ?, ?, NULL, NULL, "
            "?, NULL, NULL)",
            (
                agent_id,
                number,
                turn_id,
                key,
                driver,
                input_json,
                message_id,
                now,
            ),
        )
        self._write(
            "INSERT INTO turn_inputs (agent_id, idempotency_key, turn_id, delivery, input_hash, "
            "message_id) VALUES (?, ?, ?, ?, ?, ?)",
            (agent_id, key, turn_id, delivery, digest, message_id),
        )
        self._memo.put(("turn_tail", agent_id), number)
        live = self._memo.get(("live_turns", agent_id))
        if live is not MISSING:  # the new turn is live and has the highest number
            self._memo.put(("live_turns", agent_id), (*live, turn_id))
        if message_id is not None:
            self._memo.put(("message_turn", agent_id, message_id), turn_id)
        # A new turn's only input so far; a finished turn takes no more inputs.
        self._memo.put(
            ("turn_messages", agent_id, turn_id), () if message_id is None else (message_id,)
        )
        self.append_event(
            agent_id,
            turn_event_type("queued"),
            {
                "turn_id": turn_id,
                "number": number,
                "idempotency_key": key,
                "driver": driver,
                "status": "queued",
            },
            turn_id=turn_id,
            fit=True,
        )
        # The row just written, without reading it back (decoded from the same JSON, so it
        # equals what read_turn would return).
        turn = TurnRecord(
            id=turn_id,
            session_id=agent_id,
            number=number,
            idempotency_key=key,
            driver=driver,
            status="queued",
            input=decode_object(input_json),
            message_id=message_id,
            result=None,
            error=None,
            created_at_ms=now,
            started_at_ms=None,
            completed_at_ms=None,
        )
        self._remember_turn(turn)
        return turn, True

    def move_turn(
        self,
        agent_id: str,
        turn_id: str,
        status: TurnStatus,
        *,
        result: JSONObject | None = None,
        error: TurnFailure | None = None,
        extra: JSONObject | None = None,
    ) -> TurnRecord:
        """Move the turn to ``status`` (one allowed step), with its ``turn.<status>`` event.

        Raises:
            TurnStateError: the move is not allowed from the turn's status (a terminal
                status never changes), or there is no such turn.
        """
        self._check(write=True)
        turn = self.read_turn(agent_id, turn_id)
        if turn is None:
            raise TurnStateError(f'Turn "{turn_id}" of session "{agent_id}" does not exist.')
        if status not in TRANSITIONS[turn.status]:
            raise TurnStateError(f'Turn "{turn_id}" is {turn.status}; it cannot become {status}.')
        now = now_ms()
        started = turn.started_at_ms
        if started is None and status == "running":
            started = now
        completed = now if status in TERMINAL_STATUSES else None
        result_json = None if result is None else encode_event_data(result)
        error_json = None if error is None else _encoder.encode(error).decode()
        self._write(
            "UPDATE turns SET status = ?, result_json = coalesce(?, result_json), "
            "error_json = coalesce(?, error_json), started_at_ms = ?, completed_at_ms = ? "
            "WHERE agent_id = ? AND id = ?",
            (
                status,
                result_json,
                error_json,
                started,
                completed,
                agent_id,
                turn_id,
            ),
        )
        self._moved_running(agent_id, turn_id, status)
        self._moved_started(turn, status)
        if status in TERMINAL_STATUSES:  # bound the memo: a finished turn is rarely asked
            ids = self._memo.get(("turn_messages", agent_id, turn_id))
            for message_id in () if ids is MISSING else ids:
                self._memo.forget(("message_turn", agent_id, message_id))
            self._memo.forget(("turn_messages", agent_id, turn_id))
            live = self._memo.get(("live_turns", agent_id))
            if live is not MISSING:
                self._memo.put(("live_turns", agent_id), _without(live, turn_id))
        data: JSONObject = {"turn_id": turn_id, "status": status, **(extra or {})}
        if result is not None:
            data["result"] = result
        if error is not None:
            data["error"] = msgspec.to_builtins(error)
        self.append_event(agent_id, turn_event_type(status), data, turn_id=turn_id, fit=True)
        # The row as the UPDATE left it, without reading it back (the same coalesces, decoded
        # from the same JSON, so it equals what read_turn would return).
        moved = msgspec.structs.replace(
            turn,
            status=status,
            result=turn.result if result_json is None else decode_object(result_json),
            error=turn.error if error_json is None else _failure_decoder.decode(error_json),
            started_at_ms=started,
            completed_at_ms=completed,
        )
        self._remember_turn(moved)
        return moved

    def _moved_running(self, agent_id: str, turn_id: str, status: TurnStatus) -> None:
        # Keep the cached running turn true across a move, or forget it when the move could
        # make it another turn. With none running, a turn that starts is the running one; the
        # running turn staying live keeps it; anything else is re-read when next asked.
        key = ("running_turn", agent_id)
        known = self._memo.get(key)
        live = status in ("running", "cancelling")
        if live and (known is None or known == turn_id):
            self._memo.put(key, turn_id)
        else:
            self._memo.forget(key)

    def _moved_started(self, turn: TurnRecord, status: TurnStatus) -> None:
        # Keep the remembered started turns true across a move of ``turn`` (its row as it was
        # before): a queued turn that starts joins them in number order, a started one that
        # finishes leaves them; if a started turn's row is not remembered, forget them.
        key = ("started_turns", turn.session_id)
        ids: tuple[str, ...] = self._memo.get(key)
        was, now = turn.status in _STARTED, status in _STARTED
        if ids is MISSING or was == now:
            return
        if not now:
            self._memo.put(key, _without(ids, turn.id))
            return
        rows = [self._memo.get(("turn", turn.session_id, turn_id)) for turn_id in ids]
        if any(row is MISSING for row in rows):
            self._memo.forget(key)
            return
        at = bisect_left([row.number for row in rows], turn.number)
        self._memo.put(key, (*ids[:at], turn.id, *ids[at:]))

    def move_turns(
        self,
        agent_id: str,
        status: TurnStatus,
        select: Callable[[TurnRecord], bool],
        **fields: Any,
    ) -> list[TurnRecord]:
        """Move every live turn of the session that ``select`` picks (and may make the move)
        to ``status``; returns the moved turns."""
        moved = []
        for turn in self.live_turns(agent_id):
            if status in TRANSITIONS[turn.status] and select(turn):
                moved.append(self.move_turn(agent_id, turn.id, status, **fields))
        return moved


def _without(ids: tuple[str, ...], turn_id: str) -> tuple[str, ...]:
    """``ids`` less ``turn_id`` (if there): a C-level search and slices, not a Python scan
    per remembered id (a backlog keeps thousands of queued turns live)."""
    try:
        at = ids.index(turn_id)
    except ValueError:
        return ids
    return ids[:at] + ids[at + 1 :]


__all__ = ["LIVE_STATUSES", "TurnStatements", "input_hash"]
