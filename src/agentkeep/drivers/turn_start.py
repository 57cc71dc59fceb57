"""The transaction that starts a driver turn: ``queued → running`` (``turn.running``),
committed before the driver is called, with the request the driver gets (its revision, session
and history) read in the same transaction.
"""

from __future__ import annotations

from agentkeep.drivers.turn_endings import turn_failure
from agentkeep.drivers.types import DriverRunRequest
from agentkeep.persistence.interface import Transaction
from agentkeep.registry import tables as registry_tables
from agentkeep.sessions import tables as session_tables
from agentkeep.types import JSONObject
from agentkeep.types.ledger import MAX_EVENTS_PAGE, MESSAGE
from agentkeep.types.parts import as_wire_json
from agentkeep.types.turns import TurnRecord


def start_turn(tx: Transaction, session_id: str, turn: TurnRecord) -> DriverRunRequest | None:
    """Commit ``queued → running`` and read the run's request in the same transaction.

    Returns None, starting nothing, if the turn is no longer queued (cancelled before it
    started); a turn whose session was deleted meanwhile fails ``session_deleted``.
    """
    current = tx.turns.read(session_id, turn.id)
    if current is None or current.status != "queued":
        return None
    session = session_tables.read_session(tx, session_id)
    revision = (
        None
        if session is None or session.revision_id is None
        else registry_tables.read_revision(tx, session.revision_id)
    )
    if session is None or revision is None:
        # The session was deleted after the turn was accepted: nothing to run it for.
        gone = turn_failure("session_deleted", "The session was deleted before it ran.")
        tx.turns.move(session_id, turn.id, "failed", error=gone)
        return None
    running = tx.turns.move(session_id, turn.id, "running")
    return DriverRunRequest(
        revision=revision,
        session=session,
        turn=running,
        history=tuple(_history(tx, session_id, running.number)),
        input=_wire(running.input),
        driver_session_id=session.driver_session_id,
    )


def _wire(message: JSONObject) -> JSONObject:
    """A stored message as the wire's ``AgentMessage`` (a turn accepted before inputs were
    stored in that shape holds content blocks)."""
    wire = as_wire_json(message)
    return wire if isinstance(wire, dict) else message


def _history(tx: Transaction, session_id: str, before: int) -> list[JSONObject]:
    """Each earlier completed turn's input, then its ``message`` events' messages (wire
    ``AgentMessage``s: the driver's own, or the native loop's if the session's driver
    changed)."""
    completed: dict[str, TurnRecord] = {}
    after = 0
    while True:
        page = tx.turns.page(session_id, after, MAX_EVENTS_PAGE)
        for turn in page:
            if turn.number < before and turn.status == "completed":
                completed[turn.id] = turn
        if len(page) < MAX_EVENTS_PAGE or page[-1].number >= before:
            break
        after = page[-1].number
    outputs: dict[str, list[JSONObject]] = {turn_id: [] for turn_id in completed}
    sequence = 0
    while True:
        events = tx.ledger.events(session_id, sequence, MAX_EVENTS_PAGE)
        for event in events:
            message = as_wire_json(event.data.get("message"))
            if event.type == MESSAGE and event.turn_id in outputs and isinstance(message, dict):
                outputs[event.turn_id].append(message)
        if len(events) < MAX_EVENTS_PAGE:
            break
        sequence = events[-1].sequence
    history: list[JSONObject] = []
    for turn in sorted(completed.values(), key=lambda t: t.number):
        history.append(_wire(turn.input))
        history.extend(outputs[turn.id])
    return history
