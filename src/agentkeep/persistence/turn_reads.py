"""``tx.turns``, the reading half: what a transaction asks of a session's turns,
answered from the writer's memo where it holds the answer and from SQL otherwise
(docs/turns.md). :class:`~agentkeep.persistence.turns.TurnStatements` writes turns and keeps
what the memo remembers of them true."""

from __future__ import annotations

import hashlib
from operator import attrgetter
from typing import Any

import msgspec

from agentkeep.errors import IdempotencyConflictError
from agentkeep.persistence.codec import decode_object
from agentkeep.persistence.executor import TableStatements
from agentkeep.persistence.ledger.statements import encode_event_data, encode_event_data_value
from agentkeep.persistence.memo import MISSING
from agentkeep.types import JSONObject
from agentkeep.types.parts import content_json
from agentkeep.types.turns import TERMINAL_STATUSES, TurnDelivery, TurnFailure, TurnRecord

TURN_COLUMNS = (
    "agent_id, number, id, idempotency_key, driver, status, input_json, message_id, "
    "result_json, error_json, created_at_ms, started_at_ms, completed_at_ms"
)
#: The live statuses, as SQL (the ``turns_live`` index's condition, word for word).
LIVE_IN = "('queued', 'running', 'cancelling')"
FAILURE_DECODER = msgspec.json.Decoder(TurnFailure)
_message_id = attrgetter("id")


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


def _hashed_as_stored_before(known: str, delivery: TurnDelivery, input: JSONObject) -> bool:
    """True if ``known`` is ``input``'s hash as a store written before the wire's message
    shape made it (the conversation's ``{role, content}`` JSON): a key accepted then, retried
    after an upgrade, still returns its turn instead of a conflict."""
    before = content_json(input)
    return before is not None and known == input_hash(delivery, before)


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
        error=None if error_json is None else FAILURE_DECODER.decode(error_json),
        created_at_ms=int(created),
        started_at_ms=None if started is None else int(started),
        completed_at_ms=None if completed is None else int(completed),
    )


class TurnReads(TableStatements):
    """The turns' reads over the enclosing transaction (the base of
    :class:`~agentkeep.persistence.turns.TurnStatements`, which is ``tx.turns``).

    **By the id alone.** A turn is looked up by its id (``turns.id`` is unique in the store,
    and a turn's inputs are found by their ``turn_id``), never by ``agent_id = ? AND id = ?``.
    PostgreSQL may plan a prepared statement once for all values (a generic plan, from the
    statistics a young table had), and to that plan the two conditions look alike: it took
    the index ``(agent_id, idempotency_key)``, read the session's every turn and filtered on
    the id, so each lookup and status move cost more the longer the conversation. Where the
    session matters, the row found is checked against it.
    (``tests/unit/persistence/postgres/test_plans_on_postgres.py`` keeps every statement's
    generic plan from reading history it does not need.)
    """

    # The writer's memo (persistence/memo.py states the invariant).
    # Per session: its last turn number ("turn_tail"), its running turn ("running_turn"),
    # its live turns' ids in number order ("live_turns"), its started ones — running or
    # cancelling — in number order ("started_turns": what a step's answer moves, so a backlog
    # of queued turns costs it nothing), the turn of a message id ("message_turn"); per turn:
    # its row ("turn"). Only TurnStatements' open and move write turns and
    # turn_inputs, and they keep these true; a finished turn's row is remembered only until
    # its transaction ends (it is rarely read again).

    # -- reads -----------------------------------------------------------------------------
    def _turns(self, where: str, params: tuple[Any, ...]) -> list[TurnRecord]:
        cursor = self._read(f"SELECT {TURN_COLUMNS} FROM turns WHERE {where}", params)
        rows: list[tuple[Any, ...]] = cursor.fetchall()
        turns = [_turn(row) for row in rows]
        for turn in turns:
            self._remember_turn(turn)
        return turns

    def _remember_turn(self, turn: TurnRecord) -> None:
        self._memo.put(
            ("turn", turn.session_id, turn.id), turn, transient=turn.status in TERMINAL_STATUSES
        )

    def read(self, agent_id: str, turn_id: str) -> TurnRecord | None:
        """The turn, or None."""
        self._check(write=False)
        known: TurnRecord | None = self._memo.get(("turn", agent_id, turn_id))
        if known is not MISSING:
            return known
        # By the id alone (see the class), then checked against the session.
        found = self._turns("id = ?", (turn_id,))
        return found[0] if found and found[0].session_id == agent_id else None

    def page(self, agent_id: str, after: int = 0, limit: int = 100) -> list[TurnRecord]:
        """Up to ``limit`` turns numbered above ``after``, in order."""
        return self._turns(
            "agent_id = ? AND number > ? ORDER BY number LIMIT ?", (agent_id, after, limit)
        )

    def last(self, agent_id: str) -> TurnRecord | None:
        """The session's highest-numbered turn (any status), or None if it has none."""
        found = self._turns("agent_id = ? ORDER BY number DESC LIMIT 1", (agent_id,))
        return found[0] if found else None

    def live(self, agent_id: str) -> list[TurnRecord]:
        """The session's queued, running and cancelling turns, in order."""
        self._check(write=False)
        remembered = self._remembered_rows(agent_id, "live_turns")
        if remembered is not None:
            return remembered
        live = self._turns(f"agent_id = ? AND status IN {LIVE_IN} ORDER BY number", (agent_id,))
        self._memo.put(("live_turns", agent_id), tuple(turn.id for turn in live))
        # The same answers started and running_id would read.
        started = tuple(turn.id for turn in live if turn.status != "queued")
        self._memo.put(("started_turns", agent_id), started)
        self._memo.put(("running_turn", agent_id), started[-1] if started else None)
        return live

    def started(self, agent_id: str) -> list[TurnRecord]:
        """The session's running and cancelling turns, in number order: what an answer, a
        failure or an abort moves. Its cost does not grow with the session's queued turns."""
        self._check(write=False)
        remembered = self._remembered_rows(agent_id, "started_turns")
        if remembered is not None:
            return remembered
        started = self._turns(
            f"agent_id = ? AND status IN {LIVE_IN} AND status != 'queued' ORDER BY number",
            (agent_id,),
        )
        self._memo.put(("started_turns", agent_id), tuple(turn.id for turn in started))
        return started

    def _remembered_rows(self, agent_id: str, kind: str) -> list[TurnRecord] | None:
        """The rows of the session's turn ids remembered under ``kind`` ("live_turns",
        "started_turns"), in their order, if the memo holds the ids and every row; else None."""
        ids: tuple[str, ...] = self._memo.get((kind, agent_id))
        if ids is MISSING:
            return None
        rows = [self._memo.get(("turn", agent_id, turn_id)) for turn_id in ids]
        return None if any(row is MISSING for row in rows) else rows

    def all_live(self) -> list[TurnRecord]:
        """Every session's live turns (startup recovery)."""
        return self._turns(f"status IN {LIVE_IN} ORDER BY agent_id, number", ())

    def running_id(self, agent_id: str) -> str | None:
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
                f"SELECT id FROM turns WHERE agent_id = ? AND status IN {LIVE_IN} "
                "AND status != 'queued' ORDER BY number DESC LIMIT 1",
                (agent_id,),
            )
            running = None if found is None else str(found)
        self._memo.put(key, running)
        return running

    def of_message(self, agent_id: str, message_id: str) -> TurnRecord | None:
        """The turn the latest input with this message id belongs to (message ids can be
        reused once compaction releases them; keys and turns never are)."""
        self._check(write=False)
        key = ("message_turn", agent_id, message_id)
        turn_id: str | None = self._memo.get(key)
        if turn_id is not MISSING:
            return None if turn_id is None else self.read(agent_id, turn_id)
        found = self._turns(
            "id = (SELECT turn_id FROM turn_inputs WHERE agent_id = ?1 "
            "AND message_id = ?2 ORDER BY rowid DESC LIMIT 1)",
            (agent_id, message_id),
        )
        self._memo.put(key, found[0].id if found else None)
        return found[0] if found else None

    def message_ids(self, agent_id: str, turn_id: str) -> list[str]:
        """The message ids of the turn's inputs, in acceptance order."""
        # By the id alone (see the class).
        cursor = self._read(
            "SELECT message_id FROM turn_inputs WHERE turn_id = ? "
            "AND message_id IS NOT NULL ORDER BY rowid",
            (turn_id,),
        )
        return [str(row[0]) for row in cursor.fetchall()]

    def inputs_queued(self, agent_id: str, turn_id: str) -> bool:
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
                "WHERE i.turn_id = ? LIMIT 1",  # by the id alone (see the class)
                (turn_id,),
            )
            is not None
        )

    def of_key(
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
        if known != input_hash(delivery, input) and not _hashed_as_stored_before(
            str(known), delivery, input
        ):
            raise IdempotencyConflictError(agent_id, key)
        return self.read(agent_id, str(turn_id))

    def session_archived(self, agent_id: str) -> bool:
        """True once the session was archived (it takes no new input)."""
        # ``sessions`` is written only by raw SQL (sessions.tables), which makes the memo
        # forget everything, and by the agents cascade (tx.agents.create forgets the agent).
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


__all__ = ["FAILURE_DECODER", "LIVE_IN", "TURN_COLUMNS", "TurnReads", "input_hash"]
