"""Mapping OpenAI Responses API stream events onto agentkeep stream events.

Invariants:

* blocks are keyed by ``output_index``, so parallel function calls interleave safely;
* an item is finished only at ``response.output_item.done``: that event's item is the one
  kept (a reasoning item's ``encrypted_content`` may be incomplete when it is added);
* a reasoning item is kept whole as ``vendor`` JSON and its ``encrypted_content`` byte for
  byte in ``ReasoningEnd.reasoning``; an assistant message keeps ``{"id", "phase"}``;
* a server tool item (``web_search_call``, ...) is both the call and its result: the call
  starts at ``added``; at ``done`` the call ends and its result carries the final item;
* input tokens are the whole context (OpenAI's ``input_tokens`` already include cached ones).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseErrorEvent,
    ResponseFailedEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionToolCall,
    ResponseIncompleteEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
    ResponseReasoningSummaryPartAddedEvent,
    ResponseReasoningSummaryTextDeltaEvent,
    ResponseRefusalDeltaEvent,
    ResponseStreamEvent,
    ResponseTextDeltaEvent,
)

from agentkeep.providers._errors import classify, connection_lost, now_ms
from agentkeep.providers._wire import ToolNames, dumps_vendor, is_json_object
from agentkeep.providers.retry import AttemptOutcome
from agentkeep.types import (
    Done,
    ProviderErrorInfo,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    StreamEvent,
    TextDelta,
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


@dataclass
class _Block:
    kind: str  # text | reasoning | function | server | ignored
    call_id: str = ""
    parts: list[str] = field(default_factory=list)


def _server_call_arguments(item: dict[str, object]) -> str:
    action = item.get("action")
    return dumps_vendor(action) if isinstance(action, dict) else "{}"


class ResponsesStreamMapper:
    """Turns one attempt's Responses events into agentkeep events, then its ``Done``."""

    def __init__(self, tool_names: ToolNames) -> None:
        self._names = tool_names
        self._blocks: dict[int, _Block] = {}
        self._called_function = False
        self._produced = False
        self._terminal: AttemptOutcome | None = None
        self._usage: Usage | None = None

    def on_event(self, event: ResponseStreamEvent) -> list[StreamEvent]:
        """The agentkeep events for one vendor event (often none or one)."""
        if isinstance(event, ResponseOutputItemAddedEvent):
            return self._added(event)
        if isinstance(event, (ResponseTextDeltaEvent, ResponseRefusalDeltaEvent)):
            return self._append(event.output_index, "text", event.delta)
        if isinstance(event, ResponseReasoningSummaryTextDeltaEvent):
            return self._append(event.output_index, "reasoning", event.delta)
        if isinstance(event, ResponseReasoningSummaryPartAddedEvent) and event.summary_index > 0:
            return self._append(event.output_index, "reasoning", "\n\n")  # parts are paragraphs
        if isinstance(event, ResponseFunctionCallArgumentsDeltaEvent):
            return self._append(event.output_index, "function", event.delta)
        if isinstance(event, ResponseOutputItemDoneEvent):
            return self._done(event)
        if isinstance(event, (ResponseCompletedEvent, ResponseIncompleteEvent)):
            self._terminal = self._finished(
                event.response, isinstance(event, ResponseIncompleteEvent)
            )
        elif isinstance(event, ResponseFailedEvent):
            error = event.response.error
            body: object = (
                {}
                if error is None
                else {"error": {"type": error.code, "code": error.code, "message": error.message}}
            )
            self._terminal = self._classify(body, "the response failed")
        elif isinstance(event, ResponseErrorEvent):
            failure: object = {
                "error": {"type": event.code, "code": event.code, "message": event.message}
            }
            self._terminal = self._classify(failure, event.message)
        return []

    @staticmethod
    def _classify(body: object, message: str) -> AttemptOutcome:
        return classify(
            status=None, body=body, headers={}, message=message, request_id=None, now_ms=now_ms
        )

    def _append(self, index: int, kind: str, delta: str) -> list[StreamEvent]:
        block = self._blocks.get(index)
        if block is None or block.kind != kind:
            return []
        block.parts.append(delta)
        if kind == "text":
            return [TextDelta(delta=delta)]
        if kind == "reasoning":
            return [ReasoningDelta(delta=delta)]
        return [ToolCallDelta(call_id=block.call_id, delta=delta)]

    def _added(self, event: ResponseOutputItemAddedEvent) -> list[StreamEvent]:
        item = event.item
        self._produced = True
        if isinstance(item, ResponseOutputMessage):
            self._blocks[event.output_index] = _Block("text")
            return [TextStart()]
        if isinstance(item, ResponseReasoningItem):
            self._blocks[event.output_index] = _Block("reasoning")
            return [ReasoningStart()]
        if isinstance(item, ResponseFunctionToolCall):
            self._blocks[event.output_index] = _Block("function", call_id=item.call_id)
            namespace, name = (
                (item.namespace, item.name) if item.namespace else self._names.resolve(item.name)
            )
            return [ToolCallStart(call_id=item.call_id, name=name, namespace=namespace)]
        raw = item.to_dict(mode="json")
        kind, item_id = raw.get("type"), raw.get("id")
        if isinstance(kind, str) and kind.endswith("_call") and isinstance(item_id, str):
            self._blocks[event.output_index] = _Block("server", call_id=item_id)
            return [ToolCallStart(call_id=item_id, name=kind, server=True)]
        self._blocks[event.output_index] = _Block("ignored")
        return []

    def _done(self, event: ResponseOutputItemDoneEvent) -> list[StreamEvent]:
        block = self._blocks.pop(event.output_index, None)
        item = event.item
        if block is None or block.kind == "ignored":
            return []
        if block.kind == "text" and isinstance(item, ResponseOutputMessage):
            whole = "".join(
                p.text if isinstance(p, ResponseOutputText) else p.refusal for p in item.content
            )
            text = "".join(block.parts) or whole
            return [TextEnd(text=text, vendor=dumps_vendor({"id": item.id, "phase": item.phase}))]
        if block.kind == "reasoning" and isinstance(item, ResponseReasoningItem):
            summary = "\n\n".join(part.text for part in item.summary) or None
            vendor = dumps_vendor(item.to_dict(mode="json"))
            return [ReasoningEnd(text=summary, reasoning=item.encrypted_content, vendor=vendor)]
        if block.kind == "function" and isinstance(item, ResponseFunctionToolCall):
            self._called_function = True
            incomplete = item.status == "incomplete" or not is_json_object(item.arguments)
            return [
                ToolCallEnd(call_id=item.call_id, arguments=item.arguments, incomplete=incomplete)
            ]
        raw = item.to_dict(mode="json")
        vendor = dumps_vendor(raw)
        failed = raw.get("status") == "failed"
        return [
            ToolCallEnd(call_id=block.call_id, arguments=_server_call_arguments(raw)),
            ToolResultStart(call_id=block.call_id, vendor=vendor),
            ToolResultEnd(call_id=block.call_id, is_error=failed, vendor=vendor),
        ]

    def _finished(self, response: Response, incomplete: bool) -> AttemptOutcome:
        usage = response.usage
        if usage is not None:
            # Detail fields arrive only where the API reports them (SDK models are built
            # without validation, so an absent field is absent, not zero).
            details = getattr(usage, "input_tokens_details", None)
            self._usage = Usage(
                input=usage.input_tokens,
                output=usage.output_tokens,
                cache_read=getattr(details, "cached_tokens", 0) or 0,
                cache_write=getattr(details, "cache_write_tokens", 0) or 0,
            )
        tokens = (
            Tokens(input=self._usage.input, output=self._usage.output)
            if self._usage
            else Tokens(input=0, output=0)
        )
        if incomplete:
            reason = response.incomplete_details.reason if response.incomplete_details else None
            if reason == "content_filter":
                return Done(state="normal", tokens=tokens, end_turn=True)
            return Done(state="length", tokens=tokens)
        if not self._produced:
            info = ProviderErrorInfo(type="empty_response")
            return done_error("the model returned an empty response", provider_error=info)
        if self._called_function:
            return Done(state="tool_call", tokens=tokens)
        return Done(state="normal", tokens=tokens, end_turn=True)

    def finish(self) -> tuple[list[StreamEvent], AttemptOutcome]:
        """The closing events and outcome once the vendor stream ended."""
        usage: list[StreamEvent] = [TokenUsage(usage=self._usage)] if self._usage else []
        if self._terminal is None:
            # Cut before response.completed: retried, its partial output rewound.
            return usage, connection_lost("the stream ended before response.completed")
        return usage, self._terminal
