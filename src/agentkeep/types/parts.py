"""The wire's message shape (``AgentMessage {role, parts}``) and its one conversion to and
from agentkeep's content blocks.

Every surface shows a message in this shape — a turn's ``input`` and ``result.message``,
``message`` events, MCP results, the CLI's JSON, a driver's request and result — and every
one converts through this module, so they cannot disagree. The library's content blocks stay
internal (the native loop's conversation); the mapping is:

========================  =====================================================================
part                      content block
========================  =====================================================================
``text``                  :class:`TextBlock` (text parts ⇄ text blocks)
``reference``             :class:`ReferenceBlock`, kept verbatim; an image block is a
                          reference to a ``data:`` URI with its media type (and back)
``data``                  :class:`DataBlock`, kept verbatim
========================  =====================================================================

A reference or data part reaches a model as a line of text (``content.input_blocks``); the
message keeps the part itself. Blocks a message shows no part for: an assistant's reasoning,
tool calls and server tool results (the ledger's ``assistant.block`` events carry them); a
user message's tool-call request shows as a data part named :data:`TOOL_CALL_REQUEST`.

Names on the wire are camelCase (``mediaType``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final, Literal, TypeAlias

import msgspec

from agentkeep.types.content import (
    AssistantBlock,
    DataBlock,
    ImageBlock,
    ReferenceBlock,
    SystemMessage,
    TextBlock,
    ToolCallRequestBlock,
    UserBlock,
    UserMessage,
    input_blocks,
)
from agentkeep.types.records import JSONObject

#: The data part a user message's tool-call request shows as (never turned back into one: a
#: request block is made only by ``ak.tool_request``).
TOOL_CALL_REQUEST: Final = "agentkeep.tool_call_request"
#: The roles of the wire's ``AgentMessage``.
MessageRole: TypeAlias = Literal["user", "assistant", "system"]


class _Part(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    rename="camel",
    forbid_unknown_fields=True,
    tag_field="type",
):
    """A part of a message (the wire's ``AgentPart``), tagged by ``type``."""


class TextPart(_Part, frozen=True, kw_only=True, tag="text"):
    """Text (the wire's ``TextPart``)."""

    text: str


class ReferencePart(_Part, frozen=True, kw_only=True, tag="reference"):
    """Something the host resolves, by URI (the wire's ``ReferencePart``); shown to a model
    as a line of text naming it."""

    uri: str
    name: str | None = None
    media_type: str | None = None


class DataPart(_Part, frozen=True, kw_only=True, tag="data"):
    """Named JSON data (the wire's ``DataPart``); shown to a model as a line of text with
    the data as compact JSON."""

    name: str
    data: Any = None


Part: TypeAlias = TextPart | ReferencePart | DataPart


class WireMessage(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The wire's ``AgentMessage``: a role and its parts (``to_builtins`` gives its JSON)."""

    role: MessageRole
    parts: tuple[Part, ...]


# -- blocks → parts ----------------------------------------------------------------------------
def block_part(block: object) -> Part | None:
    """The part a content block shows as, or None for a block no message shows (reasoning,
    tool calls, server tool results)."""
    match block:
        case TextBlock(text=text):
            return TextPart(text=text)
        case ReferenceBlock(uri=uri, name=name, media_type=media_type):
            return ReferencePart(uri=uri, name=name, media_type=media_type)
        case DataBlock(name=name, data=data):
            return DataPart(name=name, data=data)
        case ImageBlock(data=data, mime_type=mime_type):
            return ReferencePart(uri=f"data:{mime_type};base64,{data}", media_type=mime_type)
        case ToolCallRequestBlock():
            return DataPart(name=TOOL_CALL_REQUEST, data=msgspec.to_builtins(block))
    return None


def parts_of(blocks: Iterable[object]) -> tuple[Part, ...]:
    """The parts of a message's blocks, in order (blocks no message shows are left out)."""
    return tuple(part for block in blocks if (part := block_part(block)) is not None)


def message_json(role: MessageRole, blocks: Iterable[object]) -> JSONObject:
    """``{role, parts}`` of blocks, as plain JSON (what is stored and sent)."""
    return {"role": role, "parts": [msgspec.to_builtins(part) for part in parts_of(blocks)]}


def assistant_json(blocks: Iterable[AssistantBlock]) -> JSONObject:
    """An assistant response as the wire's ``AgentMessage`` (its text; reasoning and tool
    calls are in the ledger's ``assistant.block`` events)."""
    return message_json("assistant", blocks)


# -- parts → blocks ----------------------------------------------------------------------------
def part_block(part: Part) -> UserBlock:
    """The content block a part is kept as (a reference to a ``data:`` URI of an image with
    its media type and no name is an image block)."""
    match part:
        case TextPart(text=text):
            return TextBlock(text=text)
        case ReferencePart(uri=uri, name=None, media_type=str(media_type)) if (
            image := _image(uri, media_type)
        ) is not None:
            return image
        case ReferencePart(uri=uri, name=name, media_type=media_type):
            return ReferenceBlock(uri=uri, name=name, media_type=media_type)
        case DataPart(name=name, data=data):
            return DataBlock(name=name, data=data)
    raise TypeError(f"not a part: {part!r}")  # pragma: no cover - the union is exhaustive


def _image(uri: str, media_type: str) -> ImageBlock | None:
    prefix = f"data:{media_type};base64,"
    if media_type.startswith("image/") and uri.startswith(prefix):
        return ImageBlock(data=uri[len(prefix) :], mime_type=media_type)
    return None


def decode_message(value: object) -> WireMessage:
    """``value`` (a :class:`WireMessage` or its JSON) as a :class:`WireMessage`.

    Raises:
        msgspec.ValidationError: naming the field that is wrong (``$.parts[0].uri``).
    """
    if isinstance(value, WireMessage):
        return value
    return msgspec.convert(value, WireMessage)


# -- stored messages of any age ----------------------------------------------------------------
def content_json(message: JSONObject) -> JSONObject | None:
    """An input message in the wire's shape as the conversation's own JSON (``{role,
    content}``): how a turn's input was stored, and its idempotency key hashed, before every
    surface took the wire's shape. None for what that JSON cannot say the same
    way (not such a message, or an ``assistant`` one)."""
    try:
        wire = decode_message(message)
    except msgspec.ValidationError:
        return None
    blocks = tuple(part_block(part) for part in wire.parts)
    if wire.role == "user":
        stored: UserMessage | SystemMessage = UserMessage(content=blocks)
    elif wire.role == "system":
        stored = SystemMessage(content=input_blocks(blocks))
    else:
        return None
    as_stored: JSONObject = msgspec.to_builtins(stored)
    return as_stored


def as_wire_json(message: object) -> object:
    """A stored message in the wire's shape: ``{role, parts}`` as it is, or a message of
    content blocks (what the conversation and older ledgers hold: ``{role, content}``)
    converted; another agent's message (role ``agent``) is a ``user`` message. Anything
    else is returned unchanged."""
    if not isinstance(message, dict):
        return message
    if isinstance(message.get("parts"), list | tuple):
        return message
    content = message.get("content")
    role = message.get("role")
    if not isinstance(content, list | tuple) or not isinstance(role, str):
        return message
    converted = {k: v for k, v in message.items() if k not in ("content", "role")}
    converted["role"] = "user" if role == "agent" else role
    converted["parts"] = [_json_part(block) for block in content if _shown(block)]
    return converted


def _shown(block: object) -> bool:
    return isinstance(block, dict) and block.get("type") in (
        "text",
        "image",
        "reference",
        "data",
        "tool_call_request",
    )


def _json_part(block: Any) -> object:
    try:
        decoded = msgspec.convert(block, UserBlock)
    except msgspec.ValidationError:
        return {"type": "data", "name": str(block.get("type")), "data": block}
    return msgspec.to_builtins(block_part(decoded))


def message_text(message: object) -> str | None:
    """The text of a message in either shape (its text parts joined), or None if it has
    none."""
    wire = as_wire_json(message)
    parts = wire.get("parts") if isinstance(wire, dict) else None
    if not isinstance(parts, list | tuple):
        return None
    texts = [
        p["text"]
        for p in parts
        if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
    ]
    return "".join(texts) or None


__all__ = [
    "TOOL_CALL_REQUEST",
    "DataPart",
    "MessageRole",
    "Part",
    "ReferencePart",
    "TextPart",
    "WireMessage",
    "as_wire_json",
    "assistant_json",
    "block_part",
    "decode_message",
    "message_json",
    "message_text",
    "part_block",
    "parts_of",
]
