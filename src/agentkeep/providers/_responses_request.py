"""Building an OpenAI Responses API request from an agentkeep context.

Invariants:

* ``store`` is false and ``reasoning.encrypted_content`` is included, so the conversation is
  carried whole on every request (the caller owns it) and reasoning replays;
* a reasoning item is replayed from its ``vendor`` JSON exactly as ``output_item.done``
  gave it (id, summary, ``encrypted_content`` byte for byte);
* an assistant text is replayed with its ``phase`` (kept in the text's ``vendor``); message
  ids are not sent, since nothing is stored server-side for them to refer to;
* a server tool's item (web search, ...) is replayed from the final item of its result.
"""

from __future__ import annotations

from typing import Any

from agentkeep.providers._wire import (
    description_of,
    framed_text,
    loads_vendor,
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

Json = dict[str, Any]
EFFORTS: dict[str, str] = {
    "off": "none",
    "minimal": "minimal",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "xhigh",
    "max": "xhigh",
}


def _input_content(block: TextBlock | ImageBlock) -> Json:
    if isinstance(block, TextBlock):
        return {"type": "input_text", "text": block.text}
    return {"type": "input_image", "image_url": f"data:{block.mime_type};base64,{block.data}"}


def _assistant_items(message: AssistantMessage) -> list[Json]:
    items: list[Json] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            item: Json = {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": block.text}],
            }
            stored = loads_vendor(block.vendor)
            if stored is not None and stored.get("phase") is not None:
                item["phase"] = stored["phase"]
            items.append(item)
        elif isinstance(block, ReasoningBlock):
            stored = loads_vendor(block.vendor)
            if stored is not None and stored.get("type") == "reasoning":
                items.append(stored)  # unsigned or foreign reasoning is not replayable
        elif isinstance(block, ToolCallBlock) and not block.server:
            items.append(
                {
                    "type": "function_call",
                    "call_id": block.call_id,
                    "name": wire_name(block.namespace, block.name),
                    "arguments": block.arguments,
                }
            )
        elif isinstance(block, ServerToolResultBlock) and (
            (stored := loads_vendor(block.vendor)) is not None
        ):
            # One vendor item is both a server call and its result: replayed once, here.
            items.append(stored)
    return items


def _tool_output(message: ToolResultMessage) -> str | list[Json]:
    if all(isinstance(block, TextBlock) for block in message.content):
        return "".join(block.text for block in message.content if isinstance(block, TextBlock))
    return [_input_content(block) for block in message.content]


def build_input(messages: tuple[Message, ...]) -> list[Json]:
    """The ``input`` items of a request, in conversation order."""
    items: list[Json] = []
    for message in messages:
        if isinstance(message, UserMessage):
            content = [_input_content(b) for b in input_blocks(message.content)]
            items.append({"type": "message", "role": "user", "content": content})
        elif isinstance(message, SystemMessage):
            content = [_input_content(b) for b in message.content]
            items.append({"type": "message", "role": "developer", "content": content})
        elif isinstance(message, AgentMessage):
            content = [_input_content(b) for b in framed_text(message)]
            items.append({"type": "message", "role": "user", "content": content})
        elif isinstance(message, AssistantMessage):
            items.extend(_assistant_items(message))
        elif isinstance(message, ToolResultMessage):
            output = _tool_output(message)
            items.append(
                {"type": "function_call_output", "call_id": message.call_id, "output": output}
            )
        elif isinstance(message, CompactionMessage):
            stored = loads_vendor(message.vendor)
            if stored is not None:
                items.append(stored)
            elif message.content:
                text = {"type": "input_text", "text": message.content}
                items.append({"type": "message", "role": "user", "content": [text]})
    return items


def build_tools(options: ModelSessionOptions) -> list[Json]:
    """Function tools, and server tools as their descriptors (``{"type": "web_search"}``)."""
    tools: list[Json] = []
    for tool in options.tools:
        if tool.server is not None:
            tools.append(dict(tool.server))
            continue
        definition: Json = {"type": "function", "name": wire_name(tool.namespace, tool.name)}
        if description := description_of(tool):
            definition["description"] = description
        definition["parameters"] = schema_of(tool)
        definition["strict"] = False  # agentkeep validates arguments itself
        tools.append(definition)
    return tools


def build_request(
    options: ModelSessionOptions,
    context: Context,
    selection: Selection,
    *,
    model: str,
    agent_id: str,
) -> Json:
    """The keyword arguments of ``responses.create`` (``stream`` excluded)."""
    body: Json = {"model": selection.model or model}
    if context.instructions:
        body["instructions"] = context.instructions
    body["input"] = build_input(context.messages)
    tools = build_tools(options)
    if tools:
        body["tools"] = tools
        body["parallel_tool_calls"] = True
    if selection.effort is not None:
        body["reasoning"] = {"effort": EFFORTS[selection.effort], "summary": "auto"}
    body["include"] = ["reasoning.encrypted_content"]
    body["store"] = False
    body["prompt_cache_key"] = agent_id  # one agent's requests share a cache shard
    if selection.service_tier == "priority":
        body["service_tier"] = "priority"
    return body
