"""The JSON shapes of turns (the wire's ``AgentTurn``, ``AgentMessage``, ``SendInput``).

A message on the wire is an ``AgentMessage`` (``role`` and ``parts``: text,
reference and data parts), or plain text; ``types/parts.py`` is the one conversion between
it and the library's content blocks. A ``user`` or ``system`` message is taken whole (a
reference or data part is kept verbatim, and shown to a native model as a line of text);
an ``assistant`` message is refused with a 422 naming ``message.role``. A turn's ``input``
and its ``result.message`` are shown in the same form (:func:`wire_result`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from agentkeep.server.wire import iso, iso_or_none
from agentkeep.types import JSONObject, MessageOptions
from agentkeep.types.ids import IdString
from agentkeep.types.parts import Part, WireMessage, as_wire_json
from agentkeep.types.turns import MAX_IDEMPOTENCY_KEY_LENGTH, TurnRecord, TurnStatus

#: A message as a turn shows it: the wire's ``AgentMessage``.
MessageOut = WireMessage


#: The schema's rule for an input's parts: at least one that is not blank text.
_NOT_BLANK_PARTS = {
    "minItems": 1,
    "contains": {
        "not": {
            "type": "object",
            "properties": {"type": {"const": "text"}, "text": {"pattern": r"^\s*$"}},
            "required": ["type", "text"],
        }
    },
}


class MessageIn(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A message as a request sends it: the wire's ``AgentMessage`` as an input takes it (a
    ``user`` or ``system`` role: an ``assistant`` one is a 422 naming ``message.role``), its
    schema stating that a part must not be blank text (the library refuses a blank message)."""

    role: Literal["user", "system"]
    parts: Annotated[tuple[Part, ...], msgspec.Meta(extra_json_schema=_NOT_BLANK_PARTS)]


#: Message text: something other than white space (a blank message is refused).
MessageText = Annotated[
    str,
    msgspec.Meta(
        description="The message's text (not blank).", extra_json_schema={"pattern": r"\S"}
    ),
]

#: An idempotency key as the library takes it: 1-255 characters, no control character.
IdempotencyKey = Annotated[
    str,
    msgspec.Meta(
        description=f"1-{MAX_IDEMPOTENCY_KEY_LENGTH} characters, no control character.",
        extra_json_schema={
            "minLength": 1,
            "maxLength": MAX_IDEMPOTENCY_KEY_LENGTH,
            "pattern": r"^[^\x00-\x1f\x7f]*$",
        },
    ),
]

#: The ``Idempotency-Key`` header's schema: the same key, in printable ASCII (a header's bytes
#: are not UTF-8 text: other keys go in the body; ``server.requests.ascii_header``).
IDEMPOTENCY_KEY_HEADER: dict[str, Any] = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_IDEMPOTENCY_KEY_LENGTH,
    "pattern": r"^[\x20-\x7e]*$",
}


class SendMessage(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True
):
    """``POST /v1/sessions/:id/messages`` (the wire's ``SendInput`` plus ``wait`` and
    agentkeep's ``delivery``, ``metadata``, ``messageId``, ``provider``, ``model`` and
    ``profile``)."""

    message: MessageText | MessageIn
    idempotency_key: IdempotencyKey | None = None
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
    """Why a turn failed, was cancelled or interrupted (the wire's ``AgentFailure``)."""

    code: str
    message: str
    details: JSONObject


class TurnOut(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A turn (the wire's ``AgentTurn``, with agentkeep's ``number`` and ``driver``)."""

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
    """What sending returns (the wire's ``EnqueuedTurn``): the turn, and whether its
    idempotency key had already made it."""

    turn: TurnOut
    duplicate: bool


class TurnList(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A page of turns by number; ``nextAfter`` is the last number of a full page."""

    turns: list[TurnOut]
    next_after: int | None


def to_user_message(message: str | MessageIn) -> str | WireMessage:
    """The message ``Sessions.send`` takes for a wire message."""
    if isinstance(message, str):
        return message
    return WireMessage(role=message.role, parts=message.parts)


def to_parts(message: JSONObject) -> WireMessage:
    """A stored message (either shape, ``types/parts.py``) as the wire's ``AgentMessage``."""
    return msgspec.convert(as_wire_json(message), WireMessage)


def wire_result(result: JSONObject | None) -> JSONObject | None:
    """A turn's result with its ``message`` as the wire's ``AgentMessage`` (a native turn
    completed before results were stored in that shape holds content blocks)."""
    if result is None or not isinstance(result.get("message"), dict):
        return result
    return {**result, "message": as_wire_json(result["message"])}


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
        result=wire_result(turn.result),
        error=None
        if turn.error is None
        else FailureOut(
            code=turn.error.code, message=turn.error.message, details=turn.error.details
        ),
        created_at=iso(turn.created_at_ms),
        started_at=iso_or_none(turn.started_at_ms),
        completed_at=iso_or_none(turn.completed_at_ms),
    )
