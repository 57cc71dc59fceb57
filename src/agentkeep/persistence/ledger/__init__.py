"""The session event ledger in the store (docs/ledger.md), in three parts:

- :mod:`.statements`: ``tx.ledger``, appending and reading events inside a transaction;
- :mod:`.hub`: :class:`LedgerHub`, told after COMMIT, which subscribers wait on;
- :mod:`.subscription`: :class:`Subscription`, one session's committed events in order.

Each module states its invariants.
"""

from agentkeep.persistence.ledger.hub import MAX_PENDING_EPHEMERALS, EphemeralQueue, LedgerHub
from agentkeep.persistence.ledger.statements import (
    LedgerStatements,
    check_input_size,
    encode_event_data,
    encode_event_data_value,
    omitted,
)
from agentkeep.persistence.ledger.subscription import Subscription, check_page

__all__ = [
    "MAX_PENDING_EPHEMERALS",
    "EphemeralQueue",
    "LedgerHub",
    "LedgerStatements",
    "Subscription",
    "check_input_size",
    "check_page",
    "encode_event_data",
    "encode_event_data_value",
    "omitted",
]
