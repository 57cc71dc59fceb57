"""Building a Chat Completions request (for any OpenAI-compatible server) from a context.

Compatible servers (vLLM, llama.cpp server, Ollama, ...) differ in what they accept, so the
request keeps to the common subset:

* user content is a plain string when it is text only, parts (``image_url`` data URLs) when
  it holds images; tool results are text (an image in a tool result becomes a placeholder);
* mid-conversation system messages and other agents' messages are framed user messages (many
  chat templates accept a system message only first);
* reasoning is not replayed (there is no field for it), and server tools are not offered (the
  API has none): both are dropped from the request, never from the caller's context.
"""

from __future__ import annotations

from typing import Any

from agentkeep.providers._wire import description_of, framed_text, schema_of, wire_name
from agentkeep.types import (
    AgentMessage,
    AssistantMessage,
    CompactionMessage,
    Context,
    ImageBlock,
    Message,
    ModelSessionOptions,
    Selection,
    SystemMessage,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
    input_blocks,
)

Json = dict[str, Any]
IMAGE_PLACEHOLDER = "[image omitted: this server takes text-only tool results]"
EFFORTS: dict[str, str] = {
    "off": "none",
    "minimal": "minimal",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "high",
    "max": "high",
}


def _user_content(blocks: tuple[TextBlock | ImageBlock, ...]) -> str | list[Json]:
    if all(isinstance(block, TextBlock) for block in blocks):
        return "\n\n".join(block.text for block in blocks if isinstance(block, TextBlock))
    parts: list[Json] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            parts.append({"type": "text", "text": block.text})
        else:
            url = f"data:{block.mime_type};base64,{block.data}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


def _assistant(message: AssistantMessage) -> Json | None:
    text = "".join(block.text for block in message.content if isinstance(block, TextBlock))
    calls = [
        {
            "id": block.call_id,
            "type": "function",
            "function": {
                "name": wire_name(block.namespace, block.name),
                "arguments": block.arguments,
            },
        }
        for block in message.content
        if isinstance(block, ToolCallBlock) and not block.server
    ]
    if not text and not calls:
        return None
    wire: Json = {"role": "assistant", "content": text or None}
    if calls:
        wire["tool_calls"] = calls
    return wire


def _message(message: Message) -> Json | None:
    if isinstance(message, UserMessage):
        return {"role": "user", "content": _user_content(input_blocks(message.content))}
    if isinstance(message, (SystemMessage, AgentMessage)):
        return {"role": "user", "content": _user_content(framed_text(message))}
    if isinstance(message, AssistantMessage):
        return _assistant(message)
    if isinstance(message, ToolResultMessage):
        text = "".join(
            block.text if isinstance(block, TextBlock) else IMAGE_PLACEHOLDER
            for block in message.content
        )
        return {"role": "tool", "tool_call_id": message.call_id, "content": text}
    if isinstance(message, CompactionMessage):
        return {"role": "user", "content": message.content} if message.content else None
    raise TypeError(f"unknown message {type(message).__name__}")


def build_tools(options: ModelSessionOptions) -> list[Json]:
    """Function tools only (Chat Completions has no server tools)."""
    tools: list[Json] = []
    for tool in options.tools:
        if tool.server is not None:
            continue
        function: Json = {"name": wire_name(tool.namespace, tool.name)}
        if description := description_of(tool):
            function["description"] = description
        function["parameters"] = schema_of(tool)
        tools.append({"type": "function", "function": function})
    return tools


def build_request(
    options: ModelSessionOptions, context: Context, selection: Selection, *, model: str
) -> Json:
    """The keyword arguments of ``chat.completions.create`` (``stream`` excluded)."""
    messages: list[Json] = []
    if context.instructions:
        messages.append({"role": "system", "content": context.instructions})
    messages.extend(wire for m in context.messages if (wire := _message(m)) is not None)
    body: Json = {"model": selection.model or model, "messages": messages}
    tools = build_tools(options)
    if tools:
        body["tools"] = tools
    if selection.effort is not None:
        body["reasoning_effort"] = EFFORTS[selection.effort]
    body["stream_options"] = {"include_usage": True}  # the last chunk carries the usage
    return body
