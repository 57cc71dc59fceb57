"""The messages a caller hands in: made from text or blocks (``ak.user``, ``ak.system``,
``ak.tool_request``), from the wire's ``AgentMessage`` (``{role, parts}``), and as a turn's
``input`` in that shape; and the checks that refuse what cannot join a conversation, naming
what is wrong. Accepting one (a durable queue write) is ``delivery.py``'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from agentkeep.errors import InvalidMessageError
from agentkeep.types import (
    AgentMessage,
    DataBlock,
    ImageBlock,
    InputBlock,
    JSONObject,
    QueueableMessage,
    ReferenceBlock,
    SystemMessage,
    TextBlock,
    ToolCallRequestBlock,
    UserBlock,
    UserMessage,
    input_blocks,
)
from agentkeep.types.parts import WireMessage, decode_message, message_json, part_block


def _blocks(content: str | Sequence[InputBlock]) -> tuple[InputBlock, ...]:
    if isinstance(content, str):
        return (TextBlock(text=content),)
    blocks = tuple(content)
    for block in blocks:
        if not isinstance(block, TextBlock | ImageBlock):
            raise InvalidMessageError(
                f"message content must be text or image blocks, got {block!r}"
            )
    return blocks


def user(content: str | Sequence[UserBlock | str]) -> UserMessage:
    """A user message from text or content blocks (a plain string in the list is a text block;
    one block may be a :func:`tool_request`)."""
    if isinstance(content, str):
        return UserMessage(content=(TextBlock(text=content),))
    blocks = tuple(TextBlock(text=b) if isinstance(b, str) else b for b in content)
    for block in blocks:
        if not isinstance(
            block, TextBlock | ImageBlock | ReferenceBlock | DataBlock | ToolCallRequestBlock
        ):
            raise InvalidMessageError(
                f"user message content must be text, image, reference, data or "
                f"tool_call_request blocks, got {block!r}"
            )
    return UserMessage(content=blocks)


def from_wire(message: object) -> QueueableMessage:
    """The wire's ``AgentMessage`` (a :class:`WireMessage` or its JSON ``{role, parts}``) as
    the message the conversation keeps (``types/parts.py``: parts ⇄ blocks, nothing lost).
    A ``user`` message keeps every part; a ``system`` message keeps text and images, a
    reference or data part becoming its text (a system message holds only those).

    Raises:
        InvalidMessageError: it is not such a message (naming the field), or its role is
            ``assistant`` (an input is a user or system message).
    """
    try:
        wire = decode_message(message)
    except msgspec.ValidationError as error:
        raise InvalidMessageError(f"message: {error}") from None
    if wire.role == "assistant":
        raise InvalidMessageError(
            'message.role: an input message is "user" or "system", got "assistant"'
        )
    blocks = tuple(part_block(part) for part in wire.parts)
    if wire.role == "system":
        return SystemMessage(content=input_blocks(blocks))
    return UserMessage(content=blocks)


def as_message(message: object) -> QueueableMessage:
    """What ``Sessions.send`` takes as a message: text (a user message), the wire's
    ``AgentMessage`` (:func:`from_wire`) or a message made with ``ak.user``/``ak.system``."""
    if isinstance(message, str):
        return user(message)
    if isinstance(message, WireMessage) or (isinstance(message, dict) and "parts" in message):
        return validate_message(from_wire(message))
    return validate_message(message)


def wire_input(message: QueueableMessage) -> JSONObject:
    """A message as a turn's ``input`` (the wire's ``AgentMessage``): another agent's
    message is a ``user`` message."""
    if isinstance(message, SystemMessage):
        return message_json("system", message.content)
    return message_json("user", message.content)


def system(content: str | Sequence[InputBlock]) -> SystemMessage:
    """A system message from text or content blocks."""
    return SystemMessage(content=_blocks(content))


def tool_request(
    name: str,
    arguments: Mapping[str, Any] | msgspec.Struct | None = None,
    *,
    namespace: str | None = None,
) -> ToolCallRequestBlock:
    """A block asking the runtime to run tool ``name`` before the model is asked; put it in a
    user message (``user([..., tool_request("load_skill", {"name": "browser"})])``).
    ``arguments`` is a JSON object (a mapping or a msgspec Struct); None means {}."""
    if arguments is None:
        args: Any = {}
    elif isinstance(arguments, msgspec.Struct):
        args = msgspec.to_builtins(arguments)
    else:
        args = dict(arguments)
    return ToolCallRequestBlock(name=name, arguments=args, namespace=namespace)


def validate_message(message: object) -> QueueableMessage:
    """Refuse what cannot join a conversation, naming what is wrong."""
    if not isinstance(message, UserMessage | SystemMessage | AgentMessage):
        raise InvalidMessageError(
            f"only user, system and agent messages can be sent, got {type(message).__name__}"
        )
    if not message.content:
        raise InvalidMessageError("a message needs at least one content block")
    if all(isinstance(b, TextBlock) and not b.text.strip() for b in message.content):
        raise InvalidMessageError("a message must not be empty")
    check_tool_requests(message)
    return message


def check_tool_requests(message: QueueableMessage) -> None:
    """Refuse a malformed tool request, more than one, or one outside a user message."""
    requests = [b for b in message.content if isinstance(b, ToolCallRequestBlock)]
    if not requests:
        return
    if not isinstance(message, UserMessage):
        role = "system" if isinstance(message, SystemMessage) else "agent"
        raise InvalidMessageError(
            f"only user messages can request a tool call; this {role} message "
            "has a tool_call_request block"
        )
    if len(requests) > 1:
        raise InvalidMessageError(
            f"a message can request at most one tool call; this one has {len(requests)} "
            "tool_call_request blocks"
        )
    _check_request(requests[0])


def _check_request(request: ToolCallRequestBlock) -> None:
    if not isinstance(request.name, str) or not request.name.strip():
        raise InvalidMessageError(
            f"a tool_call_request block needs the name of a tool, got {request.name!r}"
        )
    if request.namespace is not None and (
        not isinstance(request.namespace, str) or not request.namespace.strip()
    ):
        raise InvalidMessageError(
            f'the namespace of tool_call_request "{request.name}" must be a non-empty string '
            f"or omitted, got {request.namespace!r}"
        )
    arguments = request.arguments
    if not isinstance(arguments, dict) or not all(isinstance(k, str) for k in arguments):
        raise InvalidMessageError(
            f'the arguments of tool_call_request "{request.name}" must be a JSON object '
            f"(omit them for {{}}), got {type(arguments).__name__}"
        )
    try:
        msgspec.json.encode(arguments)
    except (TypeError, ValueError) as error:
        raise InvalidMessageError(
            f'the arguments of tool_call_request "{request.name}" are not JSON: {error}'
        ) from error
