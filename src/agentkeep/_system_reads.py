"""The read surface of ``AgentSystem``: snapshot reads of an agent's durable state (each
raises ``UnknownAgentError`` for an id never created, and ``AgentClosedError`` once close
begins), and the metadata update.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from agentkeep._admission import Admission
from agentkeep._agent_rows import merge_metadata
from agentkeep.actors.registry import AgentRegistry
from agentkeep.errors import (
    AgentClosedError,
    InvalidConfigError,
    StoreClosedError,
    UnknownAgentError,
)
from agentkeep.features import FeatureSet
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.ledger import Subscription, check_page
from agentkeep.persistence.store import Store
from agentkeep.types import (
    ConversationRecord,
    JSONObject,
    Message,
    SessionEvent,
    Settings,
    published_messages,
)

T = TypeVar("T")


def _require_session(tx: Transaction, session_id: str) -> None:
    """``UnknownAgentError`` unless the id names an agent, live or deleted."""
    if not tx.ledger.session_known(session_id):
        raise UnknownAgentError(session_id)


class SystemReads:
    """``AgentSystem``'s reads (a mixin: ``AgentSystem.__init__`` sets the attributes)."""

    # Declared for the type checker only: a runtime annotation would make these
    # internals look like fields of the public ``AgentSystem``.
    if TYPE_CHECKING:
        _store: Store
        _admission: Admission
        _agents: AgentRegistry
        _features: FeatureSet
        _defaults: Settings

    def transcript(self, agent_id: str) -> list[Message]:
        """The durable conversation; a deleted agent's stays readable (delete keeps it)."""

        def read(tx: Transaction) -> list[ConversationRecord]:
            records = tx.records.load(agent_id)
            if not records and tx.agents.get(agent_id) is None:
                raise UnknownAgentError(agent_id)
            return records

        return published_messages(self._read(read))

    def events(self, session_id: str, *, after: int = 0, limit: int = 100) -> list[SessionEvent]:
        """Up to ``limit`` (at most 1000) committed ledger events of the session (agent) with
        a sequence above ``after``, in order; a deleted agent's ledger stays readable.

        Raises:
            UnknownAgentError: no agent was ever created with this id.
            InvalidConfigError: ``after`` is negative or ``limit`` is not 1..1000.
        """
        check_page(after, limit)

        def read(tx: Transaction) -> list[SessionEvent]:
            _require_session(tx, session_id)
            return tx.ledger.events(session_id, after, limit)

        return self._read(read)

    def subscribe(
        self, session_id: str, *, after: int = 0, ephemeral: bool = False
    ) -> Subscription:
        """The session's committed events after ``after``: the backlog, then live events as
        they commit, each exactly once, in order (usable from another thread; closed by
        :meth:`close`). Resubscribe from ``last_sequence`` to resume without a gap.

        ``ephemeral=True`` also delivers, interleaved, the live-only ``text.delta`` events
        published while the subscription is open (``sequence == 0``: never stored, never
        replayed; a slow subscriber loses the oldest of them, never a durable event).

        Raises:
            UnknownAgentError: no agent was ever created with this id.
            InvalidConfigError: ``after`` is negative.
        """
        check_page(after, 1)
        self._read(lambda tx: _require_session(tx, session_id))
        return Subscription(session_id, after, self._store.ledger, self._read, ephemeral=ephemeral)

    def settings(self, agent_id: str) -> Settings:
        """The agent's current settings (the system's defaults until a message chose
        others). Raises ``UnknownAgentError``."""
        return (
            self._read_agent(agent_id, lambda tx: tx.facts.read_settings(agent_id))
            or self._defaults
        )

    def context_tokens(self, agent_id: str) -> int | None:
        """The agent's context size in tokens as last recorded (None while unknown).
        Raises ``UnknownAgentError``."""
        return self._read_agent(agent_id, lambda tx: tx.facts.read_context_tokens(agent_id))

    def state(self, agent_id: str) -> str:
        """``"running"``, ``"owes_work"`` or ``"idle"``; refused once close begins."""
        owed = self._read_agent(agent_id, lambda tx: tx.facts.read_owed(agent_id))
        known = self._agents.known(agent_id)
        if known is not None and not known.status.idle:
            return "running"
        return "idle" if owed is None else "owes_work"

    def metadata(self, agent_id: str) -> JSONObject:
        """A copy of the agent's metadata. Raises ``UnknownAgentError``."""
        row = self._read(lambda tx: tx.agents.get(agent_id))
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
        row = self._read(lambda tx: tx.agents.get(agent_id))
        if row is None:
            raise UnknownAgentError(agent_id)
        return row.parent_id

    def children_of(self, agent_id: str) -> list[str]:
        """The ids of the live (not deleted) agents created with this one as their parent,
        sorted. Raises ``UnknownAgentError``."""
        return self._read_agent(agent_id, lambda tx: tx.agents.children_of(agent_id))

    # -- internals -------------------------------------------------------------------------

    def _read(self, work: Callable[[Transaction], T]) -> T:
        """A snapshot read; after close begins, ``AgentClosedError`` like every operation."""
        self._admission.check_open()
        try:
            return self._store.read(work)
        except StoreClosedError:
            raise AgentClosedError("The agent system has been closed.") from None

    def _read_agent(self, agent_id: str, work: Callable[[Transaction], T]) -> T:
        """``work`` on a snapshot in which the agent exists (``UnknownAgentError`` if not)."""

        def read(tx: Transaction) -> T:
            if tx.agents.get(agent_id) is None:
                raise UnknownAgentError(agent_id)
            return work(tx)

        return self._read(read)

    def _require(self, agent_id: str) -> None:
        """Raise ``UnknownAgentError`` unless the agent exists."""
        self._read_agent(agent_id, lambda tx: None)
