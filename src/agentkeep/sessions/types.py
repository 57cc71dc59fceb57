"""A session as the surfaces see it: the wire's ``AgentSession``, as a msgspec struct.

A session is an agentkeep agent (session id = agent id). JSON names are the wire's
(``agentId`` is the *definition* id, ``agentRevisionId``/``agentRevision`` its pinned
revision), so a client of the wire reads them unchanged. Timestamps are integer milliseconds
(``createdAtMs``), as in the registry; the wire surfaces format them as ISO strings.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import msgspec

from agentkeep.types import JSONObject

#: ``active`` until archived; an archived session stays readable.
SessionStatus: TypeAlias = Literal["active", "archived"]


class SessionOwes(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Work the runtime owes a session that no live turn holds (docs/turns.md, "Owed work no
    turn holds"): a failed turn's question it would still answer, or work a restart would
    resume. ``Sessions.settle`` ends it (``agentkeep session settle``,
    ``POST /v1/sessions/:id/settle``).

    Attributes:
        stage: What is owed next (``inference``, ``tools``, ``compaction``, ``settlement``).
        reason: Why, in a sentence (the failed turn's error, when a turn failed).
        turn_id: The turn whose work it is (the last turn, when it failed), or None.
    """

    stage: str
    reason: str
    turn_id: str | None = None


class SessionRecord(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One session (the wire's ``AgentSession``).

    Attributes:
        id: The session id, which is its agent's id.
        definition_id: The definition it was started from (on the wire ``agentId``), or None
            for an agent created without one (``AgentSystem.create``).
        revision_id: The pinned revision's id (``agentRevisionId``), or None.
        revision_number: The pinned revision's number (``agentRevision``), or None.
        status: ``active`` or ``archived``.
        driver_session_id: The driver's opaque session id for continuation, or None (set by
            a driver; read-only here).
        metadata: The agent's metadata (``AgentSystem.update_metadata`` changes it).
        created_at_ms: When the session (agent) was created.
        updated_at_ms: When its session record last changed (archive, driver session id).
        archived_at_ms: When it was archived, or None.
        owes: The work owed that no live turn holds, or None (none owed, or a live turn
            holds it).
    """

    id: str
    definition_id: str | None = msgspec.field(name="agentId")
    revision_id: str | None = msgspec.field(name="agentRevisionId")
    revision_number: int | None = msgspec.field(name="agentRevision")
    status: SessionStatus
    driver_session_id: str | None
    metadata: JSONObject
    created_at_ms: int
    updated_at_ms: int
    archived_at_ms: int | None = None
    owes: SessionOwes | None = None

    @property
    def archived(self) -> bool:
        """True once the session was archived."""
        return self.archived_at_ms is not None
