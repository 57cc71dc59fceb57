"""An agent's whole history: the archived epochs and the conversation the provider sees now.

Nothing the runtime does deletes conversation records. An incompatible model switch restarts
what the provider sees and a compaction replaces records with a summary, but both first move
the records they take out of view into an *archived epoch* (``persistence`` keeps them in
``archived_records``). :func:`read_history` reads them back, oldest first, followed by the
current conversation as the latest epoch; only :func:`purge_archived` (``agentkeep purge ID
--archived``, :meth:`Agent.purge_archived <agentkeep.Agent.purge_archived>`) deletes them.
"""

from __future__ import annotations

import msgspec

from agentkeep.errors import UnknownAgentError
from agentkeep.persistence.interface import Transaction
from agentkeep.types import Message, Settings
from agentkeep.types.records import ArchiveReason, published_messages


class HistoryEpoch(msgspec.Struct, frozen=True, kw_only=True):
    """One stretch of an agent's history.

    Attributes:
        number: Counts from 1 per agent; numbers are never reused, not even after a purge.
        archived: False only for the last epoch: the conversation the provider sees now.
        reason: Why it was archived: ``"model_switch"`` (an incompatible model switch or a
            change of profile restarted the conversation) or ``"compaction"`` (a summary
            replaced these records); None for the current epoch.
        archived_at_ms: When it was archived (Unix ms); None for the current epoch.
        provider: The provider selected when it was archived (now, for the current epoch).
        model: The model selected then (now, for the current epoch).
        messages: Its messages, rebuilt as the provider saw them.
        profile: The profile in effect then (now, for the current epoch); None: the null one.
    """

    number: int
    archived: bool
    reason: ArchiveReason | None
    archived_at_ms: int | None
    provider: str | None
    model: str | None
    messages: tuple[Message, ...]
    profile: str | None = None


class PurgeResult(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`purge_archived` deleted: archived epochs and their records."""

    epochs: int
    records: int


def read_history(tx: Transaction, agent_id: str, defaults: Settings) -> list[HistoryEpoch]:
    """Every archived epoch not yet purged (oldest first), then the current conversation.

    ``defaults`` is the selection of an agent that never had its own (the system's).

    Raises:
        UnknownAgentError: ``agent_id`` names no live agent.
    """
    if tx.agents.get(agent_id) is None:
        raise UnknownAgentError(agent_id)
    epochs = [
        HistoryEpoch(
            number=archived.epoch,
            archived=True,
            reason=archived.reason,
            archived_at_ms=archived.archived_at_ms,
            provider=None if archived.settings is None else archived.settings.provider,
            model=None if archived.settings is None else archived.settings.model,
            messages=tuple(published_messages(list(archived.records))),
            profile=None if archived.settings is None else archived.settings.profile,
        )
        for archived in tx.archive.epochs(agent_id)
    ]
    settings = tx.facts.read_settings(agent_id) or defaults
    epochs.append(
        HistoryEpoch(
            number=tx.archive.last_epoch(agent_id) + 1,
            archived=False,
            reason=None,
            archived_at_ms=None,
            provider=settings.provider,
            model=settings.model,
            messages=tuple(published_messages(tx.records.load(agent_id))),
            profile=settings.profile,
        )
    )
    return epochs


def purge_archived(tx: Transaction, agent_id: str) -> PurgeResult:
    """Physically delete the agent's archived epochs; the current conversation is untouched.

    Raises:
        UnknownAgentError: ``agent_id`` names no live agent.
    """
    if tx.agents.get(agent_id) is None:
        raise UnknownAgentError(agent_id)
    epochs, records = tx.archive.purge(agent_id)
    return PurgeResult(epochs=epochs, records=records)


__all__ = ["HistoryEpoch", "PurgeResult", "purge_archived", "read_history"]
