"""The JSON shapes of the REST surface: the wire's names, ISO 8601 timestamps.

The library keeps timestamps as integer milliseconds (``created_at_ms``); the wire shows
ISO strings (``createdAt``), converted in one place (:func:`iso`). Every response body
is one of the structs below (or a library struct inside one), so ``/v1/openapi.json`` is
generated from exactly what is sent (:mod:`agentkeep.server.openapi`). Request bodies refuse
unknown fields, so a misspelt field is an error naming it, never silently dropped.
"""

from __future__ import annotations

import datetime
from typing import Literal

import msgspec

from agentkeep.registry import Definition, DefinitionRecord, Revision
from agentkeep.server.event_wire import wire_event_data
from agentkeep.sessions import SessionOwes, SessionRecord
from agentkeep.types import JSONObject, Message, SessionEvent
from agentkeep.types.ids import IdString


class _Out(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A response body: the wire's camelCase names."""


class _In(msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True):
    """A request body: camelCase names, unknown fields refused."""


def iso(ms: int) -> str:
    """Milliseconds since the epoch as a wire timestamp: ISO 8601, UTC, milliseconds."""
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def iso_or_none(ms: int | None) -> str | None:
    """:func:`iso`, keeping None (a tombstone or an archive that has not happened)."""
    return None if ms is None else iso(ms)


# -- responses ---------------------------------------------------------------------------------
class ErrorBody(_Out, frozen=True, kw_only=True):
    """What went wrong: a stable ``code``, a message for people, and structured details."""

    code: str
    message: str
    details: JSONObject = {}


class ErrorEnvelope(_Out, frozen=True, kw_only=True):
    """The wire's error envelope: ``{"error": {"code", "message", "details"}}``."""

    error: ErrorBody


class Health(_Out, frozen=True, kw_only=True):
    """``/healthz``: alive, nothing more (it is unauthenticated)."""

    status: Literal["ok"] = "ok"


class AgentOut(_Out, frozen=True, kw_only=True):
    """A definition (the wire's ``AgentRecord``)."""

    id: str
    current_revision_id: str
    current_revision: int
    hash: str
    definition: Definition
    created_at: str
    updated_at: str
    deleted_at: str | None


class RevisionOut(_Out, frozen=True, kw_only=True):
    """An immutable revision (the wire's ``AgentRevision``)."""

    id: str
    agent_id: str
    number: int
    hash: str
    definition: Definition
    created_at: str


class AgentList(_Out, frozen=True, kw_only=True):
    """A page of definitions in id order; ``nextAfter`` is the cursor of the next page (None
    when this page was the last)."""

    agents: list[AgentOut]
    next_after: str | None


class SessionOut(_Out, frozen=True, kw_only=True):
    """A session (the wire's ``AgentSession``); ``agentId`` None: made without a definition.
    ``owes`` (agentkeep's): work the runtime owes that no live turn holds — ``{stage,
    reason, turnId}`` — which ``POST /v1/sessions/{id}/settle`` ends; null otherwise."""

    id: str
    agent_id: str | None
    agent_revision_id: str | None
    agent_revision: int | None
    status: Literal["active", "archived"]
    driver_session_id: str | None
    metadata: JSONObject
    created_at: str
    updated_at: str
    archived_at: str | None
    owes: SessionOwes | None = None


class SessionList(_Out, frozen=True, kw_only=True):
    """A page of sessions in id order (``nextAfter`` as for agents)."""

    sessions: list[SessionOut]
    next_after: str | None


class EventOut(_Out, frozen=True, kw_only=True):
    """One ledger event (the wire's ``SessionEvent``); ``id`` is ``<session>:<sequence>``;
    ``data`` in camelCase with messages as ``AgentMessage`` (:mod:`.event_wire`)."""

    id: str
    session_id: str
    turn_id: str | None
    sequence: int
    type: str
    data: JSONObject
    created_at: str


class EventList(_Out, frozen=True, kw_only=True):
    """A page of events in sequence order; ``nextAfter`` is the last sequence of a full page
    (None when the page was not full: nothing more has committed yet)."""

    events: list[EventOut]
    next_after: int | None


class MessagesOut(_Out, frozen=True, kw_only=True):
    """The conversation view: the session's durable conversation as the model sees it."""

    session_id: str
    messages: list[Message]


class CompactOut(_Out, frozen=True, kw_only=True, omit_defaults=True):
    """A compaction was asked for (``requested``) or waited for and done (``completed``)."""

    session_id: str
    status: Literal["requested", "completed"]
    # Once ``completed`` (absent while only ``requested``): the context size in tokens
    # before it (absent while unknown), the messages left in view, and the agent's state.
    context_tokens_before: int | None = None
    messages: int | None = None
    state: Literal["running", "owes_work", "idle"] | None = None


# -- requests ----------------------------------------------------------------------------------
class SettleRequest(_In, frozen=True, kw_only=True):
    """``POST /v1/sessions/{id}/settle``: what the note answering the owed question says
    (after "The work owed here was ended: "); a default when absent."""

    note: str | None = None


class StartSession(_In, frozen=True, kw_only=True):
    """``POST /v1/sessions`` (the wire's ``StartSessionInput``). A client-chosen
    ``sessionId`` makes the start idempotent."""

    agent_id: IdString
    revision_id: str | None = None
    session_id: IdString | None = None
    metadata: JSONObject | None = None


class CompactRequest(_In, frozen=True, kw_only=True):
    """``POST /v1/sessions/:id/compact``: ``wait`` true answers once the compaction is done."""

    wait: bool = False


# -- conversions -------------------------------------------------------------------------------
def agent_out(record: DefinitionRecord) -> AgentOut:
    """A registry record on the wire."""
    return AgentOut(
        id=record.id,
        current_revision_id=record.current_revision_id,
        current_revision=record.current_revision,
        hash=record.hash,
        definition=record.definition,
        created_at=iso(record.created_at_ms),
        updated_at=iso(record.updated_at_ms),
        deleted_at=iso_or_none(record.deleted_at_ms),
    )


def revision_out(revision: Revision) -> RevisionOut:
    """A revision on the wire."""
    return RevisionOut(
        id=revision.id,
        agent_id=revision.definition_id,
        number=revision.number,
        hash=revision.hash,
        definition=revision.definition,
        created_at=iso(revision.created_at_ms),
    )


def session_out(record: SessionRecord) -> SessionOut:
    """A session record on the wire."""
    return SessionOut(
        id=record.id,
        agent_id=record.definition_id,
        agent_revision_id=record.revision_id,
        agent_revision=record.revision_number,
        status=record.status,
        driver_session_id=record.driver_session_id,
        metadata=record.metadata,
        created_at=iso(record.created_at_ms),
        updated_at=iso(record.updated_at_ms),
        archived_at=iso_or_none(record.archived_at_ms),
        owes=record.owes,
    )


def event_out(event: SessionEvent) -> EventOut:
    """A ledger event on the wire."""
    return EventOut(
        id=f"{event.session_id}:{event.sequence}",
        session_id=event.session_id,
        turn_id=event.turn_id,
        sequence=event.sequence,
        type=event.type,
        data=wire_event_data(event.type, event.data),
        created_at=iso(event.created_at_ms),
    )
