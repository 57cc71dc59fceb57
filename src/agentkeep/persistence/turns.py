"""``tx.turns``: turns in the store, inside the enclosing transaction (docs/turns.md).

Invariants:

- A turn is opened in the transaction that accepts its input, with its ``turn.queued`` event
  (the caller appends the input's ``message.accepted`` event in the same transaction).
- An idempotency key names one input of one session forever: :meth:`TurnStatements.open`
  returns the existing turn for a repeated key (and refuses a repeated key with another
  input), so a key never opens two turns and never runs a driver twice.
- Every status move is checked against :data:`~agentkeep.types.turns.TRANSITIONS` and appends
  its ``turn.<status>`` event in the same transaction; the schema's triggers refuse a change
  of a terminal status whatever the caller does.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from typing import Any

import msgspec

from agentkeep.errors import TurnStateError
from agentkeep.persistence.codec import decode_object, now_ms
from agentkeep.persistence.executor import Executor, first
from agentkeep.persistence.ledger.statements import LedgerStatements, encode_event_data
from agentkeep.persistence.memo import MISSING
from agentkeep.persistence.turn_reads import (
    FAILURE_DECODER,
    LIVE_IN,
    TURN_COLUMNS,
    TurnReads,
    input_hash,
)
from agentkeep.types import JSONObject, new_id
from agentkeep.types.turns import (
    LIVE_STATUSES,
    TERMINAL_STATUSES,
    TRANSITIONS,
    TurnDelivery,
    TurnFailure,
    TurnRecord,
    TurnStatus,
    turn_event_type,
)

#: A live turn that started: what a step's answer, a failure or an abort moves.
_STARTED = frozenset({"running", "cancelling"})
_encoder = msgspec.json.Encoder()


class TurnStatements(TurnReads):
    """The turns' writes over the enclosing transaction, and (inherited) their reads; each
    move appends its event through the transaction's ``ledger``."""

    def __init__(self, executor: Executor, ledger: LedgerStatements) -> None:
        super().__init__(executor)
        self._ledger = ledger

    # -- writes ----------------------------------------------------------------------------
    def open(
        self,
        agent_id: str,
        *,
        key: str | None,
        driver: str,
        delivery: TurnDelivery,
        input: JSONObject,
        message_id: str | None,
        input_json: str | None = None,
        key_is_new: bool = False,
    ) -> tuple[TurnRecord, bool]:
        """Open a turn for an accepted input (or join the running one, for a steer); returns
        ``(turn, new)``. ``new`` is False when ``key`` was already used by the same input:
        the turn it opened or joined comes back and nothing is written. ``input_json``:
        ``input``'s stored JSON (:func:`encode_event_data`), if the caller encoded it already.
        ``key_is_new``: the caller asked :meth:`of_key` for ``key`` in this transaction and
        it was new (so it is not asked again: only this method records keys).

        Raises:
            IdempotencyConflictError: ``key`` was used by a different input.
        """
        self._check(write=True)
        if input_json is None:
            input_json = encode_event_data(input)
        digest = input_hash(delivery, input, encoded=input_json)
        if (
            key is not None
            and not key_is_new
            and (known := self.of_key(agent_id, key, delivery, input))
        ):
            return known, False
        now = now_ms()
        key = key if key is not None else new_id()
        joined = self.running_id(agent_id) if delivery == "steer" else None
        if joined is not None:
            self._send(
                "INSERT INTO turn_inputs (agent_id, idempotency_key, turn_id, delivery, "
                "input_hash, message_id) VALUES (?, ?, ?, ?, ?, ?)",
                (agent_id, key, joined, delivery, digest, message_id),
            )
            if message_id is not None:
                self._memo.put(("message_turn", agent_id, message_id), joined)
                ids = self._memo.get(("turn_messages", agent_id, joined))
                if ids is not MISSING:
                    self._memo.put(("turn_messages", agent_id, joined), (*ids, message_id))
            turn = self.read(agent_id, joined)
            assert turn is not None  # just found running
            return turn, True
        last = self._memo.get(("turn_tail", agent_id))
        if last is MISSING:
            last = self._one(
                "SELECT coalesce(max(number), 0) FROM turns WHERE agent_id = ?", (agent_id,)
            )
        number = 1 + int(last)
        turn_id = new_id()
        self._send(
            f"INSERT INTO turns ({TURN_COLUMNS}) VALUES "
            "(?, ?, ?, ?, ?, 'queued', ?, ?, NULL, NULL, ?, NULL, NULL)",
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
        self._send(
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
        self._ledger.append(
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
        # equals what read would return).
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

    def trace(self, agent_id: str, turn_id: str, traceparent: str) -> None:
        """Store the W3C ``traceparent`` the turn was accepted under, unless it has one: a
        steer joining a traced turn keeps the turn's trace (docs/observability.md)."""
        # By the id alone (see TurnReads): the acceptance opened or joined this session's
        # turn in this transaction.
        self._send(
            "UPDATE turns SET trace_parent = ? WHERE id = ? AND trace_parent IS NULL",
            (traceparent, turn_id),
        )

    def trace_of_live(self, agent_id: str) -> tuple[str | None, str | None]:
        """``(traceparent, definition_id)`` for the turn the session's loop runs now: its
        started turn, else its first queued one (None for what is unknown)."""
        self._check(write=False)
        row = first(
            self._read(
                "SELECT (SELECT trace_parent FROM turns WHERE agent_id = ? "
                f"AND status IN {LIVE_IN} ORDER BY status = 'queued', number LIMIT 1), "
                "(SELECT definition_id FROM sessions WHERE agent_id = ?)",
                (agent_id, agent_id),
            )
        )
        return (None, None) if row is None else (row[0], row[1])

    def move(
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
        turn = self.read(agent_id, turn_id)
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
        # By the id alone (see TurnReads): read above, in this session.
        self._send(
            "UPDATE turns SET status = ?, result_json = coalesce(?, result_json), "
            "error_json = coalesce(?, error_json), started_at_ms = ?, completed_at_ms = ? "
            "WHERE id = ?",
            (status, result_json, error_json, started, completed, turn_id),
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
        self._ledger.append(agent_id, turn_event_type(status), data, turn_id=turn_id, fit=True)
        # The row as the UPDATE left it, without reading it back (the same coalesces, decoded
        # from the same JSON, so it equals what read would return).
        moved = msgspec.structs.replace(
            turn,
            status=status,
            result=turn.result if result_json is None else decode_object(result_json),
            error=turn.error if error_json is None else FAILURE_DECODER.decode(error_json),
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
        rows = self._remembered_rows(turn.session_id, "started_turns")
        if rows is None:
            self._memo.forget(key)
            return
        at = bisect_left([row.number for row in rows], turn.number)
        self._memo.put(key, (*ids[:at], turn.id, *ids[at:]))

    def move_all(
        self,
        agent_id: str,
        status: TurnStatus,
        select: Callable[[TurnRecord], bool],
        **fields: Any,
    ) -> list[TurnRecord]:
        """Move every live turn of the session that ``select`` picks (and may make the move)
        to ``status``; returns the moved turns."""
        moved = []
        for turn in self.live(agent_id):
            if status in TRANSITIONS[turn.status] and select(turn):
                moved.append(self.move(agent_id, turn.id, status, **fields))
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
