"""The JSON shapes of turns (seed 002's ``AgentTurn``, ``AgentMessage``, ``SendInput``).

A message on the wire is seed 002's ``AgentMessage`` (``role`` and ``parts``), or plain text.
The native driver takes a user message of text: a structured message is converted part by
part (:func:`to_user_message`), and what it cannot take (another role, a reference or data
part) is refused with a 422 naming the field — never silently dropped. A turn's ``input`` is
shown back in the same form (:func:`to_parts`): text blocks as text parts, any other block
(an image) as a data part named by its type.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from agentkeep.delivery import user
from agentkeep.model import JSONObject, MessageOptions, UserMessage
from agentkeep.model.ids import IdString
from agentkeep.model.turns import TurnRecord, TurnStatus
from agentkeep.server.errors import ApiError
from agentkeep.server.wire import iso, iso_or_none


class _Part(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    rename="camel",
    forbid_unknown_fields=True,
    tag_field="type",
):
    """A part of a message (seed 002's ``AgentPart``), tagged by ``type``."""


class TextPart(_Part, frozen=True, kw_only=True, tag="text"):
    """Text."""

    text: str


class ReferencePart(_Part, frozen=True, kw_only=True, tag="reference"):
    """A reference to something the host resolves (a URI)."""

    uri: str
    name: str | None = None
    media_type: str | None = None


class DataPart(_Part, frozen=True, kw_only=True, tag="data"):
    """Named JSON data."""

    name: str
    data: Any


Part = TextPart | ReferencePart | DataPart


class MessageIn(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Seed 002's ``AgentMessage`` as a request sends it."""

    role: Literal["user", "assistant", "system"]
    parts: list[Part]


class MessageOut(msgspec.Struct, frozen=True, kw_only=True):
    """A turn's input in seed 002's ``AgentMessage`` form."""

    role: str
    parts: list[Part]


class SendMessage(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True
):
    """``POST /v1/sessions/:id/messages`` (seed 002's ``SendInput`` plus ``wait`` and
    agentkeep's ``delivery``, ``metadata``, ``messageId``, ``provider``, ``model`` and
    ``profile``)."""

    message: str | MessageIn
    idempotency_key: str | None = None
    wait: bool = True
    delivery: Literal["send", "steer"] = "send"
    metadata: JSONObject | None = None  # the turn's caller-owned JSON (agentkeep's addition)
    # agentkeep's additions, checked by the library exactly as ``Sessions.send`` checks them
    # (a malformed id, an unregistered provider, a model the provider does not serve: 422):
    message_id: IdString | None = None  # the queued message's id: resending it is a no-op
    provider: str | None = None  # the provider from this message on
    model: str | None = None  # the model from this message on
    profile: str | None = None  # the opaque profile this message selects (omitted: None)

    def options(self) -> MessageOptions | None:
        """The message's provider/model/profile selection, or None when it names none."""
        if self.provider is None and self.model is None and self.profile is None:
            return None
        return MessageOptions(provider=self.provider, model=self.model, profile=self.profile)


class CancelRequest(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True
):
    """``POST /v1/sessions/:id/cancel``: a turn id, or none for the active turn."""

    turn_id: str | None = None


class FailureOut(msgspec.Struct, frozen=True, kw_only=True):
    """Why a turn failed, was cancelled or interrupted (seed 002's ``AgentFailure``)."""

    code: str
    message: str
    details: JSONObject


class TurnOut(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A turn (seed 002's ``AgentTurn``, with agentkeep's ``number`` and ``driver``)."""

    id: str
    session_id: str
    number: int
    idempotency_key: str
    driver: str
    status: TurnStatus
    input: MessageOut
    result: JSONObject | None
    error: FailureOut | None
    created_at: str
    started_at: str | None
    completed_at: str | None


class SentTurnOut(msgspec.Struct, frozen=True, kw_only=True):
    """What sending returns (seed 002's ``EnqueuedTurn``): the turn, and whether its
    idempotency key had already made it."""

    turn: TurnOut
    duplicate: bool


class TurnList(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A page of turns by number; ``nextAfter`` is the last number of a full page."""

    turns: list[TurnOut]
    next_after: int | None


def to_user_message(message: str | MessageIn) -> UserMessage:
    """The native driver's input for a wire message (422 for what it cannot take)."""
    if isinstance(message, str):
        return user(message)
    if message.role != "user":
        raise ApiError(
            422,
            "invalid_request",
            f'message.role: the agentkeep driver takes user messages, got "{message.role}".',
            {"field": "message.role"},
        )
    texts: list[str] = []
    for index, part in enumerate(message.parts):
        if not isinstance(part, TextPart):
            field = f"message.parts[{index}]"
            raise ApiError(
                422,
                "invalid_request",
                f"{field}: the agentkeep driver takes text parts only, "
                f"got a {part.__class__.__name__}.",
                {"field": field},
            )
        texts.append(part.text)
    return user(texts)


def to_parts(message: JSONObject) -> MessageOut:
    """A stored message (``role``, ``content`` blocks) as seed 002's ``AgentMessage``."""
    parts: list[Part] = []
    for block in message.get("content") or []:
        if isinstance(block, dict) and block.get("type") == "text":
            parts.append(TextPart(text=str(block.get("text", ""))))
        else:
            kind = block.get("type", "block") if isinstance(block, dict) else "block"
            parts.append(DataPart(name=str(kind), data=block))
    return MessageOut(role=str(message.get("role", "user")), parts=parts)


def turn_out(turn: TurnRecord) -> TurnOut:
    """A turn on the wire."""
    return TurnOut(
        id=turn.id,
        session_id=turn.session_id,
        number=turn.number,
        idempotency_key=turn.idempotency_key,
        driver=turn.driver,
        status=turn.status,
        input=to_parts(turn.input),
        result=turn.result,
        error=None
        if turn.error is None
        else FailureOut(
            code=turn.error.code, message=turn.error.message, details=turn.error.details
        ),
        created_at=iso(turn.created_at_ms),
        started_at=iso_or_none(turn.started_at_ms),
        completed_at=iso_or_none(turn.completed_at_ms),
    )
