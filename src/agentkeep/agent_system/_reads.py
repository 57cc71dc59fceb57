"""The reads of ``AgentSystem``: snapshot reads of an agent's durable state (each
raises ``UnknownAgentError`` for an id never created, and ``AgentClosedError`` once close
begins), and the metadata update.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from agentkeep._admission import Admission
from agentkeep.actors.agent_tier import AgentTier
from agentkeep.agent_system._rows import merge_metadata
from agentkeep.errors import (
    AgentClosedError,
    InvalidConfigError,
    StoreClosedError,
    UnknownAgentError,
)
from agentkeep.features import FeatureSet
from agentkeep.history import HistoryEpoch, PurgeResult, purge_archived, read_history
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.ledger import Subscription, check_page
from agentkeep.persistence.store import Store
from agentkeep.types import JSONObject, Message, SessionEvent, Settings
from agentkeep.types.records import ConversationRecord, published_messages

T = TypeVar("T")


def _require_agent(tx: Transaction, agent_id: str) -> None:
    """``UnknownAgentError`` unless the id names an agent, live or deleted."""
    if not tx.ledger.agent_known(agent_id):
        raise UnknownAgentError(agent_id)


class Reads:
    """``AgentSystem``'s reads, and the read helpers its other parts share."""

    def __init__(
        self,
        store: Store,
        *,
        admission: Admission,
        agents: AgentTier,
        features: FeatureSet,
        defaults: Settings,
    ) -> None:
        self._store = store
        self._admission = admission
        self._agents = agents
        self._features = features
        self._defaults = defaults

    def transcript(self, agent_id: str) -> list[Message]:
        """The durable conversation; a deleted agent's stays readable (delete keeps it)."""

        def read(tx: Transaction) -> list[ConversationRecord]:
            records = tx.records.load(agent_id)
            if not records and tx.agents.get(agent_id) is None:
                raise UnknownAgentError(agent_id)
            return records

        return published_messages(self.read(read))

    def events(self, agent_id: str, *, after: int = 0, limit: int = 100) -> list[SessionEvent]:
        """``AgentSystem.events`` (documented there)."""
        check_page(after, limit)

        def read(tx: Transaction) -> list[SessionEvent]:
            _require_agent(tx, agent_id)
            return tx.ledger.events(agent_id, after, limit)

        return self.read(read)

    def subscribe(self, agent_id: str, *, after: int = 0, ephemeral: bool = False) -> Subscription:
        """``AgentSystem.subscribe`` (documented there)."""
        check_page(after, 1)
        self.read(lambda tx: _require_agent(tx, agent_id))
        return Subscription(agent_id, after, self._store.ledger, self.read, ephemeral=ephemeral)

    def settings(self, agent_id: str) -> Settings:
        """``AgentSystem.settings`` (documented there)."""
        return (
            self.read_agent(agent_id, lambda tx: tx.facts.read_settings(agent_id)) or self._defaults
        )

    def context_tokens(self, agent_id: str) -> int | None:
        """``AgentSystem.context_tokens`` (documented there)."""
        return self.read_agent(agent_id, lambda tx: tx.facts.read_context_tokens(agent_id))

    def state(self, agent_id: str) -> str:
        """``"running"``, ``"owes_work"`` or ``"idle"``; refused once close begins."""
        owed = self.read_agent(agent_id, lambda tx: tx.facts.read_owed(agent_id))
        known = self._agents.known(agent_id)
        if known is not None and not known.status.idle:
            return "running"
        return "idle" if owed is None else "owes_work"

    def metadata(self, agent_id: str) -> JSONObject:
        """A copy of the agent's metadata. Raises ``UnknownAgentError``."""
        row = self.read(lambda tx: tx.agents.get(agent_id))
        if row is None:
            raise UnknownAgentError(agent_id)
        return dict(row.metadata)

    def update_metadata(self, agent_id: str, patch: JSONObject) -> JSONObject:
        """Shallow-merge ``patch`` into the agent's metadata; committed before it shows."""
        if not isinstance(patch, dict):
            raise InvalidConfigError("a metadata update must be a JSON object")
        with self._admission.operation():
            return merge_metadata(
                self._store.handle,
                self._features,
                lambda agent_id: self._agents.get_or_make(agent_id).contexts,
                self._defaults,
                agent_id,
                patch,
            )

    def parent_of(self, agent_id: str) -> str | None:
        """The id of the agent's parent, or None. Raises ``UnknownAgentError``."""
        row = self.read(lambda tx: tx.agents.get(agent_id))
        if row is None:
            raise UnknownAgentError(agent_id)
        return row.parent_id

    def children_of(self, agent_id: str) -> list[str]:
        """``AgentSystem.children_of`` (documented there)."""
        return self.read_agent(agent_id, lambda tx: tx.agents.children_of(agent_id))

    def history(self, agent_id: str) -> list[HistoryEpoch]:
        """The agent's epochs (``Agent.history``)."""
        return self.read(lambda tx: read_history(tx, agent_id, self._defaults))

    def purge_archived(self, agent_id: str) -> PurgeResult:
        """Delete the agent's archived epochs (``Agent.purge_archived``)."""
        with self._admission.operation():
            return self._store.transact(lambda tx: purge_archived(tx, agent_id))

    # -- the helpers the other parts share ---------------------------------------------------

    def read(self, work: Callable[[Transaction], T]) -> T:
        """A snapshot read; after close begins, ``AgentClosedError`` like every operation."""
        self._admission.check_open()
        try:
            return self._store.read(work)
        except StoreClosedError:
            raise AgentClosedError("The agent system has been closed.") from None

    def read_agent(self, agent_id: str, work: Callable[[Transaction], T]) -> T:
        """``work`` on a snapshot in which the agent exists (``UnknownAgentError`` if not)."""

        def read(tx: Transaction) -> T:
            if tx.agents.get(agent_id) is None:
                raise UnknownAgentError(agent_id)
            return work(tx)

        return self.read(read)

    def require(self, agent_id: str) -> None:
        """Raise ``UnknownAgentError`` unless the agent exists."""
        self.read_agent(agent_id, lambda tx: None)
