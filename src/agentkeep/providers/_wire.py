"""Small mapping helpers every vendor adapter shares (no vendor SDK imported here)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from agentkeep.types import (
    AgentMessage,
    ImageBlock,
    Message,
    ReasoningBlock,
    SystemMessage,
    TextBlock,
    ToolDescriptor,
)

NAMESPACE_SEPARATOR = "__"
EMPTY_SCHEMA: dict[str, object] = {"type": "object", "properties": {}}
# A grammar tool takes one raw string: the call's raw input becomes {"input": raw}.
GRAMMAR_SCHEMA: dict[str, object] = {
    "type": "object",
    "properties": {"input": {"type": "string"}},
    "required": ["input"],
}


def wire_name(namespace: str | None, name: str) -> str:
    """The one flat name a vendor sees; namespaced tools become ``namespace__name``."""
    return f"{namespace}{NAMESPACE_SEPARATOR}{name}" if namespace else name


class ToolNames:
    """Maps the flat names vendors echo back to (namespace, name) of the model session's tools."""

    def __init__(self, tools: Iterable[ToolDescriptor]) -> None:
        self._by_wire = {wire_name(t.namespace, t.name): (t.namespace, t.name) for t in tools}

    def resolve(self, wire: str) -> tuple[str | None, str]:
        """(namespace, name) for ``wire``; an unknown name is returned as it came."""
        return self._by_wire.get(wire, (None, wire))


def description_of(tool: ToolDescriptor) -> str:
    """The tool's description, with its namespace's description and grammar folded in."""
    parts = [tool.namespace_description or "", tool.description or ""]
    if tool.grammar:
        parts.append(f"The `input` argument must match this Lark grammar:\n{tool.grammar}")
    return "\n\n".join(part for part in parts if part)


def schema_of(tool: ToolDescriptor) -> dict[str, object]:
    """The JSON Schema of the tool's arguments (an empty object schema if it has none)."""
    if tool.grammar:
        return GRAMMAR_SCHEMA
    return tool.parameters if tool.parameters is not None else EMPTY_SCHEMA


def parse_arguments(arguments: str) -> dict[str, Any]:
    """A call's JSON arguments as an object; malformed or non-object text becomes ``{}``.

    Replaying a call the model left malformed (an ``incomplete`` call, say) must still make a
    valid request; the tool result already told the model what went wrong.
    """
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def is_json_object(arguments: str) -> bool:
    """True if ``arguments`` is complete JSON for an object (a finished tool call)."""
    try:
        return isinstance(json.loads(arguments), dict)
    except json.JSONDecodeError:
        return False


def loads_vendor(vendor: str | None) -> dict[str, Any] | None:
    """A ``vendor`` payload this adapter stored, or None if absent or not a JSON object."""
    if not vendor:
        return None
    try:
        value = json.loads(vendor)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def dumps_vendor(value: object) -> str:
    """Compact JSON for a ``vendor`` payload (stored verbatim, replayed as parsed)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def framed_text(message: Message) -> tuple[TextBlock | ImageBlock, ...]:
    """User-side content for roles a vendor lacks (mid-conversation system, other agents).

    The frame tells the model who spoke: ``<system-message>`` … ``</system-message>`` or
    ``<agent-message from="id">`` … ``</agent-message>``, texts joined by newlines, images
    kept in place. Reasoning blocks of another agent are not replayed.
    """
    if isinstance(message, SystemMessage):
        opening, closing = "<system-message>", "</system-message>"
        blocks: tuple[TextBlock | ImageBlock | ReasoningBlock, ...] = message.content
    elif isinstance(message, AgentMessage):
        opening, closing = f'<agent-message from="{message.author.id}">', "</agent-message>"
        blocks = message.content
    else:
        raise TypeError(f"no framing for {type(message).__name__}")
    framed: list[TextBlock | ImageBlock] = []
    texts = [opening]
    for block in blocks:
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ImageBlock):
            framed.extend((TextBlock(text="\n".join(texts)), block))
            texts = []
    texts.append(closing)
    framed.append(TextBlock(text="\n".join(texts)))
    return tuple(framed)
