"""The two ways a loop fact reaches the conversation and the ledger inside a plan's
transaction: :func:`append_record` (a record and its event) and :func:`append_event` (an
event alone). A loop fact cannot be refused, so an oversized event is appended with ``fit``
(its payload left out, the content still in the transcript).
"""

from __future__ import annotations

from agentkeep.persistence.interface import Transaction
from agentkeep.types import (
    JSONObject,
)
from agentkeep.types import ledger as events
from agentkeep.types.records import (
    BlockRecord,
    ConversationRecord,
)


def append_record(
    tx: Transaction, agent_id: str, record: ConversationRecord, **extra: object
) -> ConversationRecord:
    """Append ``record`` and, in the same transaction, its ledger event (none for a private
    block: it is not published, ``agentkeep.tools.provider_tools``)."""
    position = tx.records.append(agent_id, record)
    if isinstance(record, BlockRecord) and record.private:
        return record
    kind, data = events.record_event(record)
    append_event(tx, agent_id, kind, {**data, **extra, "position": position})
    return record


def append_event(tx: Transaction, agent_id: str, type: str, data: JSONObject) -> None:
    """Append a loop fact's event, attributed to the session's running turn (if any). A loop
    fact cannot be refused, so an oversized one is fitted (docs/ledger.md)."""
    tx.ledger.append(agent_id, type, data, turn_id=tx.turns.running_id(agent_id), fit=True)
