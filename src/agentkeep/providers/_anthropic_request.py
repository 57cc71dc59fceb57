"""Building an Anthropic Messages API request body from an agentkeep context.

Invariants:

* the body is a pure function of (options, context, selection, settings): the same kept
  prefix gives the same bytes, so the vendor's prompt cache keeps hitting;
* signed thinking is replayed as ``{"type": "thinking", "thinking", "signature"}`` with the
  signature byte for byte; redacted thinking and server-tool blocks are replayed from the
  ``vendor`` JSON stored when they streamed in;
* at most three ``cache_control`` markers (the limit is four): the system prompt, the last
  tool, and the last cacheable block of the last message (the stable prefix so far).
"""

from __future__ import annotations

from typing import Any, Literal

from agentkeep.providers._wire import (
    description_of,
    framed_text,
    loads_vendor,
    parse_arguments,
    schema_of,
    wire_name,
)
from agentkeep.types import (
    AgentMessage,
    AssistantMessage,
    CompactionMessage,
    Context,
    ImageBlock,
    Message,
    ModelSessionOptions,
    ReasoningBlock,
    Selection,
    ServerToolResultBlock,
    SystemMessage,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
    input_blocks,
)

CACHE_MARKER: dict[str, str] = {"type": "ephemeral"}
ThinkingMode = Literal["adaptive", "budget"]
# Adaptive thinking (current models): the model decides how much to think at this effort.
ADAPTIVE_EFFORTS: dict[str, str] = {
    "minimal": "low",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "xhigh",
    "max": "max",
}
# Budgeted thinking (older models): max_tokens is raised above the budget when needed.
THINKING_BUDGETS: dict[str, int] = {
    "minimal": 1024,
    "low": 2048,
    "medium": 8192,
    "high": 16384,
    "xhigh": 32000,
    "max": 63999,
}
_CACHEABLE = {"text", "image", "tool_use", "tool_result", "server_tool_use", "document"}

Json = dict[str, Any]


def _content_block(block: TextBlock | ImageBlock) -> Json:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": block.mime_type, "data": block.data},
    }


def _assistant_block(block: object) -> Json | None:
    """One assistant block on the wire, or None if Anthropic cannot take it back."""
    if isinstance(block, TextBlock):
        if not block.text:
            return None
        text: Json = {"type": "text", "text": block.text}
        stored = loads_vendor(block.vendor)
        if stored is not None and isinstance(stored.get("citations"), list):
            text["citations"] = stored["citations"]
        return text
    if isinstance(block, ReasoningBlock):
        stored = loads_vendor(block.vendor)
        if stored is not None and stored.get("type") == "redacted_thinking":
            return stored
        if block.reasoning is not None:  # a signature: Anthropic verifies it on replay
            return {"type": "thinking", "thinking": block.text or "", "signature": block.reasoning}
        return None  # unsigned reasoning (another vendor's) would be rejected
    if isinstance(block, ToolCallBlock):
        arguments = parse_arguments(block.arguments)
        if block.server:
            stored = loads_vendor(block.vendor) or {
                "type": "server_tool_use",
                "id": block.call_id,
                "name": block.name,
            }
            return {**stored, "input": arguments}
        return {
            "type": "tool_use",
            "id": block.call_id,
            "name": wire_name(block.namespace, block.name),
            "input": arguments,
        }
    if isinstance(block, ServerToolResultBlock):
        return loads_vendor(block.vendor)  # the vendor's own result block, as it came
    return None


def _message(message: Message) -> tuple[str, list[Json]] | None:
    """(role, content) of one message, or None if nothing of it goes on the wire."""
    if isinstance(message, UserMessage):
        return "user", [_content_block(b) for b in input_blocks(message.content)]
    if isinstance(message, (SystemMessage, AgentMessage)):
        return "user", [_content_block(b) for b in framed_text(message)]
    if isinstance(message, AssistantMessage):
        blocks = [wire for b in message.content if (wire := _assistant_block(b)) is not None]
        return ("assistant", blocks) if blocks else None
    if isinstance(message, ToolResultMessage):
        result: Json = {
            "type": "tool_result",
            "tool_use_id": message.call_id,
            "content": [_content_block(b) for b in message.content],
        }
        if message.is_error:
            result["is_error"] = True
        return "user", [result]
    if isinstance(message, CompactionMessage):
        return ("user", [{"type": "text", "text": message.content}]) if message.content else None
    raise TypeError(f"unknown message {type(message).__name__}")


def build_messages(messages: tuple[Message, ...]) -> list[Json]:
    """The wire messages; consecutive same-role messages merge (tool results share one turn)."""
    wire: list[Json] = []
    for message in messages:
        mapped = _message(message)
        if mapped is None:
            continue
        role, content = mapped
        if wire and wire[-1]["role"] == role:
            wire[-1]["content"].extend(content)
        else:
            wire.append({"role": role, "content": content})
    for entry in reversed(wire[-1:]):  # mark the stable prefix: the last cacheable block
        for block in reversed(entry["content"]):
            if block.get("type") in _CACHEABLE:
                block["cache_control"] = dict(CACHE_MARKER)
                break
    return wire


def build_tools(options: ModelSessionOptions) -> list[Json]:
    """Tool definitions; a server tool's descriptor is sent verbatim (it names its type)."""
    tools: list[Json] = []
    for tool in options.tools:
        if tool.server is not None:
            tools.append({"name": tool.name, **tool.server})
            continue
        definition: Json = {"name": wire_name(tool.namespace, tool.name)}
        if description := description_of(tool):
            definition["description"] = description
        definition["input_schema"] = schema_of(tool)
        tools.append(definition)
    if tools:
        tools[-1] = {**tools[-1], "cache_control": dict(CACHE_MARKER)}
    return tools


def build_request(
    options: ModelSessionOptions,
    context: Context,
    selection: Selection,
    *,
    model: str,
    max_tokens: int,
    thinking_mode: ThinkingMode = "adaptive",
) -> Json:
    """The keyword arguments of ``messages.create`` (``stream`` excluded)."""
    body: Json = {"model": selection.model or model, "max_tokens": max_tokens}
    if context.instructions:
        body["system"] = [
            {"type": "text", "text": context.instructions, "cache_control": dict(CACHE_MARKER)}
        ]
    body["messages"] = build_messages(context.messages)
    tools = build_tools(options)
    if tools:
        body["tools"] = tools
    effort = selection.effort
    if effort == "off":
        body["thinking"] = {"type": "disabled"}
    elif effort is not None and thinking_mode == "adaptive":
        body["thinking"] = {"type": "adaptive"}
        body["output_config"] = {"effort": ADAPTIVE_EFFORTS[effort]}
    elif effort is not None:
        budget = THINKING_BUDGETS[effort]
        body["thinking"] = {"type": "enabled", "budget_tokens": budget}
        body["max_tokens"] = max(max_tokens, budget + 4096)
    # No effort: the model's own default (thinking off for budgeted models).
    return body
