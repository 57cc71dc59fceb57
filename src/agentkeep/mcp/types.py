"""The MCP tools' arguments and results, as msgspec structs: the one source of their schemas.

Every tool's ``inputSchema`` and ``outputSchema`` is :func:`schema_of` one of these types, and
every call's arguments are decoded with the same type (:func:`decode_arguments`), so what a
client is told and what the server accepts cannot drift apart. Unknown argument fields are
refused, naming the field, so a misspelt argument is never silently dropped.

Argument names are snake_case, as the MCP tools of docs/mcp.md name them (``conversation_id``,
``run_in_background``); the agents, sessions, turns and events inside the results are the
REST API's very JSON (``server/wire.py``: the wire's camelCase names, ISO 8601 timestamps,
messages as ``AgentMessage {role, parts}``, event data in camelCase).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

import msgspec

from agentkeep.errors import InvalidMessageError
from agentkeep.registry import DefinitionInput, DefinitionPatch
from agentkeep.server.turn_wire import TurnOut
from agentkeep.server.wire import AgentOut, EventOut, RevisionOut, SessionOut
from agentkeep.types import JSONObject
from agentkeep.types.parts import Part, TextPart, WireMessage
from agentkeep.types.turns import TurnStatus

#: The longest a tool may wait for a turn; longer work belongs in ``run_in_background``.
MAX_WAIT_SECONDS = 3600.0
#: How long ``talk_to_agent`` waits for the answer when ``timeout_seconds`` is not given.
DEFAULT_WAIT_SECONDS = 300.0
#: The largest page of a list.
MAX_PAGE = 1000

T = TypeVar("T")


class _Args(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A tool's arguments: unknown fields are an error naming them."""


class _Result(msgspec.Struct, frozen=True, kw_only=True):
    """A tool's structured result."""


def _doc(text: str) -> msgspec.Meta:
    return msgspec.Meta(description=text)


_AGENT_ID = "The agent (definition) id: 1-128 of [a-z0-9._-]."
_SESSION_ID = "A session (conversation) id, as returned in conversation_id by talk_to_agent."
_MESSAGE = "The message: text, or a structured {role: 'user', parts: [...]} (seed 002)."
AgentId = Annotated[str, _doc(_AGENT_ID)]
Page = Annotated[int, msgspec.Meta(ge=1, le=MAX_PAGE, description="At most this many (1-1000).")]
After = Annotated[int, msgspec.Meta(ge=0, description="Only those numbered above this.")]


# -- the wire's structured message --------------------------------------------------------------
class AgentMessage(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The wire's structured message (``AgentMessage``) as a tool takes it: a ``user`` (the
    default) or ``system`` message of text, reference and data parts, kept verbatim (a
    native model is shown a reference or data part as a line of text: docs/mcp.md)."""

    role: Literal["user", "system"] = "user"
    parts: list[Part]

    def wire(self) -> WireMessage:
        """As the library's :class:`~agentkeep.types.parts.WireMessage`."""
        return WireMessage(role=self.role, parts=tuple(self.parts))


def require_content(message: str | AgentMessage) -> str | AgentMessage:
    """``message`` if it has some content to send.

    Raises:
        InvalidMessageError: it is empty (or only whitespace): nothing would be asked.
    """
    if isinstance(message, str):
        empty = not message.strip()
    else:
        empty = not any(
            not isinstance(part, TextPart) or part.text.strip() for part in message.parts
        )
    if empty:
        raise InvalidMessageError("The message is empty; send some text.")
    return message


MessageInput = Annotated[str | AgentMessage, _doc(_MESSAGE)]


# -- arguments ----------------------------------------------------------------------------------
class ListAgentsArgs(_Args, frozen=True, kw_only=True):
    """agents_list: definitions in id order, a page at a time."""

    include_deleted: Annotated[bool, _doc("Include deleted (tombstoned) agents.")] = False
    after: Annotated[str | None, _doc("Start after this id: next_after of the page before.")] = None
    limit: Page = 100


class GetAgentArgs(_Args, frozen=True, kw_only=True):
    """agents_get: one agent's current definition."""

    agent_id: AgentId
    include_deleted: Annotated[bool, _doc("Also return a deleted agent.")] = False


#: agents_create takes the definition itself (the wire's ``AgentDefinitionInput``).
CreateAgentArgs = DefinitionInput


class UpdateAgentArgs(_Args, frozen=True, kw_only=True):
    """agents_update: apply the PATCH rules of docs/registry.md to an agent's current definition."""

    agent_id: AgentId
    patch: DefinitionPatch


class DeleteAgentArgs(_Args, frozen=True, kw_only=True):
    """agents_delete: tombstone an agent; its revisions and sessions stay readable."""

    agent_id: AgentId


class _SessionRef(_Args, frozen=True, kw_only=True):
    """Names a session as ``session_id`` or ``conversation_id`` (docs/mcp.md)."""

    session_id: Annotated[str | None, _doc(_SESSION_ID)] = None
    conversation_id: Annotated[str | None, _doc("Legacy name of session_id.")] = None


class GetConversationArgs(_SessionRef, frozen=True, kw_only=True):
    """agents_get_conversation: a session with its turns and its event ledger."""

    turns_after: After = 0
    turns_limit: Page = 100
    events_after: Annotated[
        int, msgspec.Meta(ge=0, description="Only events with a sequence above this.")
    ] = 0
    events_limit: Page = 100


class TalkArgs(_SessionRef, frozen=True, kw_only=True):
    """talk_to_agent: start or continue a session and send it a message as a turn."""

    agent_id: Annotated[str | None, _doc(_AGENT_ID)] = None
    agent: Annotated[str | None, _doc("Legacy name of agent_id.")] = None
    message: Annotated[str | AgentMessage | None, _doc(_MESSAGE)] = None
    prompt: Annotated[str | None, _doc("Legacy name of message (text).")] = None
    description: Annotated[
        str | None, _doc("A short label of the request (legacy); kept in the turn's metadata.")
    ] = None
    idempotency_key: Annotated[
        str | None,
        _doc(
            "Repeat it to retry safely: the same key returns the turn it made instead of "
            "sending again (without a session, it also finds the session it started)."
        ),
    ] = None
    run_in_background: Annotated[
        bool, _doc("Return once the turn is accepted instead of waiting for the answer.")
    ] = False
    timeout_seconds: Annotated[
        float,
        msgspec.Meta(
            gt=0,
            le=MAX_WAIT_SECONDS,
            description="How long to wait for the answer; the turn continues after it.",
        ),
    ] = DEFAULT_WAIT_SECONDS


class SteerArgs(_SessionRef, frozen=True, kw_only=True):
    """steer_agent: a message that joins the session's running turn (or opens one)."""

    message: MessageInput
    idempotency_key: Annotated[str | None, _doc("Repeat it to retry safely.")] = None


class CancelArgs(_SessionRef, frozen=True, kw_only=True):
    """cancel_turn: cancel the session's active turn, or the one named."""

    turn_id: Annotated[str | None, _doc("The turn; the active one if absent.")] = None


class SettleArgs(_SessionRef, frozen=True, kw_only=True):
    """settle_session: end the work the session owes that no live turn holds."""

    note: Annotated[
        str | None, _doc("What the note answering the owed question says; a default if absent.")
    ] = None


# -- results ------------------------------------------------------------------------------------
class AgentList(_Result, frozen=True, kw_only=True):
    """A page of agents; ``next_after`` is the ``after`` of the next page (None: the last)."""

    agents: list[AgentOut]
    next_after: str | None


class AgentUpdate(_Result, frozen=True, kw_only=True):
    """What an update did: the agent after it, its current revision (the new one if
    ``changed``), and whether the patched content differed."""

    record: AgentOut
    revision: RevisionOut
    changed: bool


class Conversation(_Result, frozen=True, kw_only=True):
    """A session (``conversation_id`` is its id), its turns and its events (each a page)."""

    conversation_id: str
    session: SessionOut
    turns: list[TurnOut]
    events: list[EventOut]
    answer: str | None
    next_events_after: int | None


class TalkResult(_Result, frozen=True, kw_only=True):
    """The turn a talk made (or found, ``duplicate``) and, if it was waited for, its answer.

    ``conversation_id`` is the durable session id, not a chat id.
    """

    conversation_id: str
    agent_id: str | None
    started_session: bool
    duplicate: bool
    status: TurnStatus
    answer: str | None
    turn: TurnOut


class SteerResult(_Result, frozen=True, kw_only=True):
    """The turn the steer joined (or opened)."""

    conversation_id: str
    duplicate: bool
    turn: TurnOut


class CancelResult(_Result, frozen=True, kw_only=True):
    """The turn as it stands after the cancel (``cancelled``, or terminal already)."""

    conversation_id: str
    turn: TurnOut


class SettleResult(_Result, frozen=True, kw_only=True):
    """The session once its owed work was ended (``session.owes`` is null)."""

    conversation_id: str
    session: SessionOut


# -- schemas and decoding -----------------------------------------------------------------------
def schema_of(type_: Any) -> dict[str, Any]:
    """The JSON Schema of ``type_`` with an object at its root, as MCP requires of a tool's
    input and output schemas (msgspec puts a ``$ref`` there); the other definitions stay in
    ``$defs``, where the inlined root's references find them."""
    (root,), components = msgspec.json.schema_components((type_,), ref_template="#/$defs/{name}")
    ref = root.get("$ref")
    if ref is None:
        return dict(root)
    inlined: dict[str, Any] = dict(components[ref.rsplit("/", 1)[-1]])
    if len(components) > 1 or _refers(inlined):
        inlined["$defs"] = components
    return inlined


def _refers(node: Any) -> bool:
    if isinstance(node, dict):
        return "$ref" in node or any(_refers(v) for v in node.values())
    if isinstance(node, list):
        return any(_refers(v) for v in node)
    return False


def decode_arguments(arguments: JSONObject | None, type_: type[T]) -> T:
    """The arguments as ``type_``.

    Raises:
        msgspec.ValidationError: a field is missing, unknown or of the wrong type (named).
    """
    return msgspec.convert(arguments or {}, type_)


def to_structured(result: msgspec.Struct) -> JSONObject:
    """A result as the JSON object of a tool's ``structuredContent``."""
    value = msgspec.to_builtins(result)
    assert isinstance(value, dict)  # every result type is a struct: an object
    return value
