"""Mapping Anthropic's streamed Messages events onto agentkeep stream events.

One :class:`AnthropicStreamMapper` reads one attempt. Invariants:

* every block that starts is ended by its ``content_block_stop`` (text/reasoning/tool call/
  server result ``*_end``); blocks are keyed by the vendor's ``index`` so parallel tool calls
  interleave safely;
* a thinking signature arrives whole in ``signature_delta`` and is kept byte for byte in
  ``ReasoningEnd.reasoning``; a redacted thinking block is kept whole as ``vendor`` JSON;
* server-tool blocks keep the block's JSON (every field the server sent) in ``vendor``, and a
  cited text keeps ``{"citations": [...]}`` there;
* input tokens are the whole context: ``input_tokens + cache_read + cache_creation``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from anthropic.types import (
    CitationsDelta,
    InputJSONDelta,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawContentBlockStopEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    RawMessageStopEvent,
    RawMessageStreamEvent,
    RedactedThinkingBlock,
    ServerToolUseBlock,
    SignatureDelta,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolUseBlock,
)
from anthropic.types import TextBlock as VendorTextBlock

from agentkeep.providers._errors import connection_lost
from agentkeep.providers._wire import ToolNames, dumps_vendor, is_json_object
from agentkeep.providers.retry import AttemptOutcome
from agentkeep.types import (
    Done,
    DoneState,
    ProviderErrorInfo,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    StreamEvent,
    TextBlock,
    TextEnd,
    TextStart,
    Tokens,
    TokenUsage,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolResultEnd,
    ToolResultStart,
    Usage,
    done_error,
)
from agentkeep.types import TextDelta as AkTextDelta

# stop_reason → (done state, end_turn). pause_turn: a long server-tool turn paused; the turn is
# not over, so the caller should request again with this response appended.
_STOP_STATES: dict[str, tuple[DoneState, bool | None]] = {
    "end_turn": ("normal", True),
    "stop_sequence": ("normal", True),
    "refusal": ("normal", True),
    "pause_turn": ("normal", False),
    "tool_use": ("tool_call", None),
    "max_tokens": ("length", None),
    "model_context_window_exceeded": ("length", None),
}


@dataclass
class _Block:
    kind: str  # text | thinking | redacted | tool | server_tool | server_result | ignored
    call_id: str = ""
    parts: list[str] = field(default_factory=list)
    signature: str | None = None
    vendor: str | None = None
    result_content: tuple[TextBlock, ...] = ()
    result_error: bool = False
    citations: list[dict[str, object]] = field(default_factory=list)


def _result_summary(vendor: dict[str, object]) -> tuple[tuple[TextBlock, ...], bool]:
    """Readable content of a server tool's result block, and whether it is an error."""
    content = vendor.get("content")
    if isinstance(content, dict):
        kind = content.get("type")
        is_error = isinstance(kind, str) and kind.endswith("_error")
        return (TextBlock(text=dumps_vendor(content)),), is_error
    if isinstance(content, list):
        lines = []
        for item in content:
            if isinstance(item, dict) and "url" in item:
                lines.append(f"{item.get('title', '')} <{item['url']}>".strip())
        if lines:
            return (TextBlock(text="\n".join(lines)),), False
    return (), False


class AnthropicStreamMapper:
    """Turns one attempt's vendor events into agentkeep events, then its ``Done``."""

    def __init__(self, tool_names: ToolNames) -> None:
        self._names = tool_names
        self._blocks: dict[int, _Block] = {}
        self._stop_reason: str | None = None
        self._input = self._cache_read = self._cache_write = self._output = 0
        self._stopped = False
        self._produced = False

    def on_event(self, event: RawMessageStreamEvent) -> list[StreamEvent]:
        """The agentkeep events for one vendor event (often none or one)."""
        if isinstance(event, RawMessageStartEvent):
            usage = event.message.usage
            self._input = usage.input_tokens
            self._cache_read = usage.cache_read_input_tokens or 0
            self._cache_write = usage.cache_creation_input_tokens or 0
            self._output = usage.output_tokens
            return []
        if isinstance(event, RawContentBlockStartEvent):
            return self._start(event)
        if isinstance(event, RawContentBlockDeltaEvent):
            return self._delta(event)
        if isinstance(event, RawContentBlockStopEvent):
            return self._stop(event)
        if isinstance(event, RawMessageDeltaEvent):
            self._stop_reason = event.delta.stop_reason or self._stop_reason
            # message_delta usage is cumulative; input fields appear only when they changed.
            self._output = event.usage.output_tokens
            if event.usage.input_tokens is not None:
                self._input = event.usage.input_tokens
            if event.usage.cache_read_input_tokens is not None:
                self._cache_read = event.usage.cache_read_input_tokens
            if event.usage.cache_creation_input_tokens is not None:
                self._cache_write = event.usage.cache_creation_input_tokens
            return []
        if isinstance(event, RawMessageStopEvent):
            self._stopped = True
        return []

    def _start(self, event: RawContentBlockStartEvent) -> list[StreamEvent]:
        block = event.content_block
        self._produced = True
        if isinstance(block, VendorTextBlock):
            self._blocks[event.index] = _Block("text", parts=[block.text] if block.text else [])
            head: list[StreamEvent] = [TextStart()]
            return [*head, AkTextDelta(delta=block.text)] if block.text else head
        if isinstance(block, ThinkingBlock):
            self._blocks[event.index] = _Block("thinking", parts=[block.thinking])
            return [ReasoningStart()]
        if isinstance(block, RedactedThinkingBlock):
            vendor = dumps_vendor(block.to_dict(mode="json"))
            self._blocks[event.index] = _Block("redacted", signature=block.data, vendor=vendor)
            return [ReasoningStart()]
        if isinstance(block, ToolUseBlock):
            self._blocks[event.index] = _Block("tool", call_id=block.id)
            namespace, name = self._names.resolve(block.name)
            return [ToolCallStart(call_id=block.id, name=name, namespace=namespace)]
        if isinstance(block, ServerToolUseBlock):
            vendor = dumps_vendor(block.to_dict(mode="json"))
            self._blocks[event.index] = _Block("server_tool", call_id=block.id, vendor=vendor)
            return [ToolCallStart(call_id=block.id, name=block.name, server=True, vendor=vendor)]
        raw = block.to_dict(mode="json")
        call_id = raw.get("tool_use_id")
        if isinstance(call_id, str):  # a server tool's result (web search, fetch, code, ...)
            content, is_error = _result_summary(raw)
            vendor = dumps_vendor(raw)
            self._blocks[event.index] = _Block(
                "server_result",
                call_id=call_id,
                vendor=vendor,
                result_content=content,
                result_error=is_error,
            )
            return [ToolResultStart(call_id=call_id, vendor=vendor)]
        self._blocks[event.index] = _Block("ignored")  # e.g. a container upload
        return []

    def _delta(self, event: RawContentBlockDeltaEvent) -> list[StreamEvent]:
        block = self._blocks.get(event.index)
        delta = event.delta
        if block is None:
            return []
        if isinstance(delta, TextDelta) and block.kind == "text":
            block.parts.append(delta.text)
            return [AkTextDelta(delta=delta.text)]
        if isinstance(delta, ThinkingDelta) and block.kind == "thinking":
            block.parts.append(delta.thinking)
            return [ReasoningDelta(delta=delta.thinking)]
        if isinstance(delta, SignatureDelta) and block.kind == "thinking":
            block.signature = (block.signature or "") + delta.signature
            return []
        if isinstance(delta, InputJSONDelta) and block.kind in ("tool", "server_tool"):
            block.parts.append(delta.partial_json)
            return [ToolCallDelta(call_id=block.call_id, delta=delta.partial_json)]
        if isinstance(delta, CitationsDelta) and block.kind == "text":
            block.citations.append(delta.citation.to_dict(mode="json"))
            return []
        return []  # unknown deltas carry nothing agentkeep keeps

    def _stop(self, event: RawContentBlockStopEvent) -> list[StreamEvent]:
        block = self._blocks.pop(event.index, None)
        if block is None or block.kind == "ignored":
            return []
        text = "".join(block.parts)
        if block.kind == "text":
            # Citations (with their encrypted indexes) go back with the text on replay.
            vendor = dumps_vendor({"citations": block.citations}) if block.citations else None
            return [TextEnd(text=text, vendor=vendor)]
        if block.kind == "thinking":
            return [ReasoningEnd(text=text, reasoning=block.signature)]
        if block.kind == "redacted":
            return [ReasoningEnd(reasoning=block.signature, vendor=block.vendor)]
        if block.kind in ("tool", "server_tool"):
            arguments = text or "{}"  # a call without arguments streams no input_json_delta
            incomplete = not is_json_object(arguments)
            return [ToolCallEnd(call_id=block.call_id, arguments=arguments, incomplete=incomplete)]
        return [
            ToolResultEnd(
                call_id=block.call_id,
                content=block.result_content,
                is_error=block.result_error,
                vendor=block.vendor,  # the result block arrives whole at its start
            )
        ]

    def finish(self) -> tuple[list[StreamEvent], AttemptOutcome]:
        """The closing events and outcome once the vendor stream ended."""
        if not self._stopped:
            # The connection ended before message_stop: the response is cut, so it is retried
            # (its partial output is rewound by the retry driver).
            return [], connection_lost("the stream ended before message_stop")
        total_input = self._input + self._cache_read + self._cache_write
        usage = Usage(
            input=total_input,
            output=self._output,
            cache_read=self._cache_read,
            cache_write=self._cache_write,
        )
        events: list[StreamEvent] = [TokenUsage(usage=usage)]
        if not self._produced:
            info = ProviderErrorInfo(type="empty_response", diagnostics={"stop": self._stop_reason})
            return events, done_error("the model returned an empty response", provider_error=info)
        state, end_turn = _STOP_STATES.get(self._stop_reason or "end_turn", ("normal", True))
        tokens = Tokens(input=total_input, output=self._output)
        return events, Done(state=state, tokens=tokens, end_turn=end_turn)
