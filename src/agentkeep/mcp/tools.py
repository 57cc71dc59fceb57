"""The ten MCP tools: the seven of docs/mcp.md, plus ``steer_agent``, ``cancel_turn`` and
``settle_session``.

Each tool is a name, a description, its argument and result types (whose schemas the
server lists) and a handler over a :class:`~agentkeep.mcp.backend.Backend`. Handlers hold no
state of their own (docs/mcp.md: MCP keeps no second registry, transcript or engine):
everything they return was read from, or committed by, the backend.

``talk_to_agent`` and the legacy fields of docs/mcp.md: ``agent`` is ``agent_id``,
``conversation_id`` is ``session_id``, ``prompt`` is ``message``; giving both names of one
field with different values is an error. ``description`` is kept in the turn's message
metadata (and the new session's). The result's ``conversation_id`` is the durable session id.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from agentkeep.errors import AgentExistsError, InvalidMessageError
from agentkeep.mcp.backend import Backend
from agentkeep.mcp.errors import InvalidArgumentsError, SessionMismatchError, TurnTimeoutError
from agentkeep.mcp.types import (
    AgentList,
    AgentMessage,
    AgentUpdate,
    CancelArgs,
    CancelResult,
    Conversation,
    CreateAgentArgs,
    DeleteAgentArgs,
    GetAgentArgs,
    GetConversationArgs,
    ListAgentsArgs,
    SettleArgs,
    SettleResult,
    SteerArgs,
    SteerResult,
    TalkArgs,
    TalkResult,
    UpdateAgentArgs,
    require_content,
)
from agentkeep.server.turn_wire import turn_out
from agentkeep.server.wire import AgentOut, agent_out, event_out, revision_out, session_out
from agentkeep.sessions import SessionRecord
from agentkeep.types import JSONObject
from agentkeep.types.parts import message_text
from agentkeep.types.turns import TurnRecord


@dataclass(frozen=True)
class ToolSpec:
    """One tool: what ``tools/list`` shows of it, and how ``tools/call`` runs it."""

    name: str
    title: str
    description: str
    arguments: type[Any]
    result: type[Any]
    handler: Callable[[Backend, Any], msgspec.Struct]
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False


# -- agents (definitions) -----------------------------------------------------------------------
def agents_list(backend: Backend, args: ListAgentsArgs) -> AgentList:
    """A page of definitions; ``next_after`` is set when the page is full."""
    agents = backend.list_definitions(
        include_deleted=args.include_deleted, after=args.after, limit=args.limit
    )
    next_after = agents[-1].id if len(agents) == args.limit else None
    return AgentList(agents=[agent_out(a) for a in agents], next_after=next_after)


def agents_get(backend: Backend, args: GetAgentArgs) -> AgentOut:
    """One definition with its current revision."""
    return agent_out(backend.get_definition(args.agent_id, include_deleted=args.include_deleted))


def agents_create(backend: Backend, args: CreateAgentArgs) -> AgentOut:
    """Create a definition (revision 1)."""
    # The registry checks the definition (and names the field it refuses).
    return agent_out(backend.create_definition(_wire(args)))


def agents_update(backend: Backend, args: UpdateAgentArgs) -> AgentUpdate:
    """Apply a PATCH; ``changed`` says whether a revision was appended."""
    update = backend.update_definition(args.agent_id, _wire(args.patch))
    return AgentUpdate(
        record=agent_out(update.record),
        revision=revision_out(update.revision),
        changed=update.changed,
    )


def agents_delete(backend: Backend, args: DeleteAgentArgs) -> AgentOut:
    """Tombstone a definition (a retry returns it unchanged)."""
    return agent_out(backend.delete_definition(args.agent_id))


# -- sessions and turns -------------------------------------------------------------------------
def agents_get_conversation(backend: Backend, args: GetConversationArgs) -> Conversation:
    """A session with a page of its turns and of its events, and its latest answer."""
    session_id = _named_session(args.session_id, args.conversation_id)
    session = backend.get_session(session_id)
    turns = backend.turns(session_id, after=args.turns_after, limit=args.turns_limit)
    events = backend.events(session_id, after=args.events_after, limit=args.events_limit)
    full = len(events) == args.events_limit
    return Conversation(
        conversation_id=session_id,
        session=session_out(session),
        turns=[turn_out(t) for t in turns],
        events=[event_out(e) for e in events],
        answer=next((a for t in reversed(turns) if (a := answer_of(t)) is not None), None),
        next_events_after=events[-1].sequence if full else None,
    )


def talk_to_agent(backend: Backend, args: TalkArgs) -> TalkResult:
    """Start (without a session) or continue a session, send the message as a turn, and
    wait for its end unless ``run_in_background`` (see the module docstring)."""
    agent_id = _one("agent_id", args.agent_id, "agent", args.agent)
    session_id = _one("session_id", args.session_id, "conversation_id", args.conversation_id)
    message = _message(args.message, args.prompt)
    metadata: JSONObject | None = (
        {"description": args.description} if args.description is not None else None
    )
    started = False
    if session_id is None:
        if agent_id is None:
            raise InvalidArgumentsError(
                "talk_to_agent needs agent_id (or agent) to start a session, or session_id "
                "(or conversation_id) to continue one."
            )
        session, started = start_for_talk(backend, agent_id, args.idempotency_key, metadata)
    else:
        session = backend.get_session(session_id)
        if agent_id is not None and session.definition_id != agent_id:
            raise SessionMismatchError(session.id, session.definition_id, agent_id)
    sent = backend.send(
        session.id,
        message,
        delivery="send",
        idempotency_key=args.idempotency_key,
        metadata=metadata,
    )
    turn = sent.turn
    if not args.run_in_background and not turn.terminal:
        try:
            turn = backend.wait_turn(session.id, turn.id, timeout_seconds=args.timeout_seconds)
        except TimeoutError:
            raise TurnTimeoutError(session.id, turn.id, args.timeout_seconds) from None
    return TalkResult(
        conversation_id=session.id,
        agent_id=session.definition_id,
        started_session=started,
        duplicate=sent.duplicate,
        status=turn.status,
        answer=answer_of(turn),
        turn=turn_out(turn),
    )


def steer_agent(backend: Backend, args: SteerArgs) -> SteerResult:
    """Send a steer: it joins the running turn, or opens one when none runs."""
    session_id = _named_session(args.session_id, args.conversation_id)
    sent = backend.send(
        session_id,
        require_content(args.message),
        delivery="steer",
        idempotency_key=args.idempotency_key,
        metadata=None,
    )
    return SteerResult(
        conversation_id=session_id, duplicate=sent.duplicate, turn=turn_out(sent.turn)
    )


def cancel_turn(backend: Backend, args: CancelArgs) -> CancelResult:
    """Cancel the active turn (or ``turn_id``); a terminal turn is returned unchanged."""
    session_id = _named_session(args.session_id, args.conversation_id)
    return CancelResult(
        conversation_id=session_id, turn=turn_out(backend.cancel_turn(session_id, args.turn_id))
    )


def settle_session(backend: Backend, args: SettleArgs) -> SettleResult:
    """End the work owed that no live turn holds (a failed turn's question), with a note."""
    session_id = _named_session(args.session_id, args.conversation_id)
    settled = backend.settle_session(session_id, note=args.note)
    return SettleResult(conversation_id=session_id, session=session_out(settled))


# -- helpers ------------------------------------------------------------------------------------
def answer_of(turn: TurnRecord) -> str | None:
    """The text of a completed turn's answer (its result message's text parts), or None."""
    if turn.status != "completed" or turn.result is None:
        return None
    return message_text(turn.result.get("message"))


def talk_session_id(agent_id: str, idempotency_key: str) -> str:
    """The session a keyed talk without a session starts: derived from the agent and the key,
    so a retry of the same talk finds the session (and the turn) the first attempt made.
    An agentkeep id: a letter, then 31 lowercase hex digits."""
    digest = hashlib.sha256(f"{agent_id}\x00{idempotency_key}".encode()).hexdigest()
    return "k" + digest[:31]


def start_for_talk(
    backend: Backend, agent_id: str, key: str | None, metadata: JSONObject | None
) -> tuple[SessionRecord, bool]:
    """The session a talk without a session runs in, and whether this call started it: a new
    one, or with ``key`` the one :func:`talk_session_id` names (a retry finds it), as
    ``talk_to_agent`` and ``agentkeep talk --key`` do."""
    if key is None:
        return backend.start_session(agent_id, session_id=None, metadata=metadata), True
    session_id = talk_session_id(agent_id, key)
    try:
        return backend.start_session(agent_id, session_id=session_id, metadata=metadata), True
    except AgentExistsError:
        # A retry: the first attempt started it (and, if it got that far, sent the turn).
        session = backend.get_session(session_id)
        if session.definition_id != agent_id:  # pragma: no cover - a sha256 collision
            raise SessionMismatchError(session.id, session.definition_id, agent_id) from None
        return session, False


def _one(name: str, value: str | None, legacy: str, legacy_value: str | None) -> str | None:
    if value is not None and legacy_value is not None and value != legacy_value:
        raise InvalidArgumentsError(
            f'{name} "{value}" and {legacy} "{legacy_value}" differ; {legacy} is the legacy '
            f"name of {name}: give one of them."
        )
    return value if value is not None else legacy_value


def _named_session(session_id: str | None, conversation_id: str | None) -> str:
    found = _one("session_id", session_id, "conversation_id", conversation_id)
    if found is None:
        raise InvalidArgumentsError("Name the session: session_id (or conversation_id).")
    return found


def _message(message: str | AgentMessage | None, prompt: str | None) -> str | AgentMessage:
    if message is not None and prompt is not None and message != prompt:
        raise InvalidArgumentsError(
            "message and prompt differ; prompt is the legacy name of message: give one."
        )
    found = message if message is not None else prompt
    if found is None:
        raise InvalidMessageError("talk_to_agent needs a message (or prompt).")
    return require_content(found)


def _wire(value: msgspec.Struct) -> JSONObject:
    """A decoded definition input or patch back as the wire's JSON object (absent fields stay
    absent), for the backend, which checks it."""
    wire = msgspec.to_builtins(value)
    assert isinstance(wire, dict)  # a struct
    return wire


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "agents_list",
        "List agents",
        "List persistent agents (definitions), in id order, a page at a time.",
        ListAgentsArgs,
        AgentList,
        agents_list,
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        "agents_get",
        "Inspect an agent",
        "Inspect one agent: its current definition and revision.",
        GetAgentArgs,
        AgentOut,
        agents_get,
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        "agents_create",
        "Create an agent",
        "Create an agent from a definition (seed 002's AgentDefinitionInput: id, name, "
        "description, instructions, driver, model {id: 'provider/model', settings}, authRef, "
        "resources, toolbox, workspace, metadata). Ids stay reserved after delete.",
        CreateAgentArgs,
        AgentOut,
        agents_create,
    ),
    ToolSpec(
        "agents_update",
        "Edit an agent",
        "Edit an agent with a patch: top-level fields replace; driver, resources, toolbox and "
        "workspace merge by field; null clears model, authRef and workspace.cwd. Changed "
        "content makes a new revision; existing sessions keep theirs.",
        UpdateAgentArgs,
        AgentUpdate,
        agents_update,
        idempotent=True,
    ),
    ToolSpec(
        "agents_delete",
        "Delete an agent",
        "Delete an agent while retaining its revisions and session history.",
        DeleteAgentArgs,
        AgentOut,
        agents_delete,
        destructive=True,
        idempotent=True,
    ),
    ToolSpec(
        "agents_get_conversation",
        "Inspect a conversation",
        "Inspect a durable agent session (conversation_id from talk_to_agent): the session, "
        "its turns with their status and results, its event ledger, and the latest answer.",
        GetConversationArgs,
        Conversation,
        agents_get_conversation,
        read_only=True,
        idempotent=True,
    ),
    ToolSpec(
        "talk_to_agent",
        "Talk to an agent",
        "Start or continue an agent session: send a message as a turn and wait for the "
        "answer. Without session_id a new session of agent_id starts; the result's "
        "conversation_id is the durable session id (pass it back to continue). Use "
        "run_in_background for long work, then agents_get_conversation.",
        TalkArgs,
        TalkResult,
        talk_to_agent,
    ),
    ToolSpec(
        "steer_agent",
        "Steer an agent",
        "Send a message that joins the session's running turn (the agent sees it at its "
        "next step), or opens a turn if none runs.",
        SteerArgs,
        SteerResult,
        steer_agent,
    ),
    ToolSpec(
        "cancel_turn",
        "Cancel a turn",
        "Cancel the session's active turn (or turn_id): a queued turn never runs, a running "
        "one is aborted. Turns queued behind it still run.",
        CancelArgs,
        CancelResult,
        cancel_turn,
        destructive=True,
        idempotent=True,
    ),
    ToolSpec(
        "settle_session",
        "End a session's owed work",
        "After a turn failed, the runtime still owes its question an answer (the session's "
        "`owes`). This ends that work: a note answers the question and the session is idle "
        "(it can be archived). Refused while a live turn holds the work (cancel_turn it).",
        SettleArgs,
        SettleResult,
        settle_session,
        destructive=True,
        idempotent=True,
    ),
)
