"""Ending the work a session owes and no turn holds, in one transaction (docs/turns.md,
"Owed work no turn holds"; ``Sessions.settle``).

A failed native turn is final, but the runtime still owes its question an answer (a
failure note is owed an answer, so the next start asks again). When nobody wants that
answer, :func:`end_owed` gives it up durably, as one transaction:

- tool calls still open are answered with an error result (a dispatched batch's entries are
  removed with their call stores), so no call is left unanswered behind the note;
- notices waiting for the next inference are dropped (they were owed that inference);
- a note is appended that answers the owed question — a ``system`` record of reason
  ``settled``, the one system record owed no answer (``loop.view.tail_owes_answer``), so the
  conversation is well-formed and no later start or restart asks again;
- the run settles: the owed fact is deleted, the run's store cleared, and ``settled`` is
  appended to the ledger (``{"ended": true}``), exactly as a run's own settlement does.

The caller checks first that no live turn holds the work (a live turn is cancelled instead)
and that no actor runs it. The appended records carry no ``turn_id``: the work belongs to no
turn. Nothing here runs a feature's transactional hook (no loop runs).
"""

from __future__ import annotations

from agentkeep.loop.context import error_result
from agentkeep.loop.view import tail_owes_answer, undispatched_calls
from agentkeep.persistence.interface import Transaction
from agentkeep.runtime.kv_areas import CALL_AREA, RUN_AREA, area_prefix
from agentkeep.types import JSONObject, SystemMessage, TextBlock
from agentkeep.types import ledger as events
from agentkeep.types.records import ConversationRecord, SystemRecord, ToolRecord

#: What an open tool call is answered with when its owed work is ended.
ENDED_CALL = "The tool call was never finished: its work was ended (settle)."
#: The note's text when the caller gives none.
DEFAULT_NOTE = "Ended without an answer (settle)."
#: The note's prefix: what a reader of the conversation sees.
NOTE_PREFIX = "The work owed here was ended: "


def owes(tx: Transaction, agent_id: str) -> bool:
    """Whether the session owes work durably: the owed fact stands."""
    return tx.facts.read_owed(agent_id) is not None


def end_owed(tx: Transaction, agent_id: str, note: str | None = None) -> bool:
    """End the work ``agent_id`` owes (see the module); True if there was any (False: the
    owed fact was absent and the conversation owes no answer — nothing is written)."""
    records = tx.records.load(agent_id)
    if not owes(tx, agent_id) and not tail_owes_answer(records):
        return False
    pending = tx.calls.pending(agent_id)
    for call in pending:
        tx.calls.remove(agent_id, call.internal_id)
        _append(tx, agent_id, ToolRecord(message=error_result(call.call, ENDED_CALL)), ran=False)
        tx.kv.drop(area_prefix(agent_id, CALL_AREA, call.internal_id))
    for block in undispatched_calls(records, pending):
        _append(tx, agent_id, ToolRecord(message=error_result(block, ENDED_CALL)), ran=False)
    for notice in tx.queue.notices(agent_id):
        tx.queue.remove_notice(agent_id, notice.seq)
    text = NOTE_PREFIX + (note if note else DEFAULT_NOTE)
    message = SystemMessage(content=(TextBlock(text=text),))
    _append(tx, agent_id, SystemRecord(message=message, reason="settled"))
    tx.facts.drop_owed(agent_id)
    tx.kv.drop(area_prefix(agent_id, RUN_AREA))
    tx.ledger.append(agent_id, events.SETTLED, {"ended": True}, fit=True)
    return True


def _append(tx: Transaction, agent_id: str, record: ConversationRecord, **extra: object) -> None:
    """Append ``record`` with its ledger event (as the loop's own appends do), of no turn."""
    position = tx.records.append(agent_id, record)
    kind, data = events.record_event(record)
    payload: JSONObject = {**data, **extra, "position": position}
    tx.ledger.append(agent_id, kind, payload, fit=True)
