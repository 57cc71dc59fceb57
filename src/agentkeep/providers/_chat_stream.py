"""Mapping Chat Completions chunks (``chat.completion.chunk``) onto agentkeep events.

Invariants:

* text and reasoning are sequential: at most one of them is open, and either is ended before
  the other starts or a tool call starts;
* tool calls are keyed by ``delta.tool_calls[i].index``; their id and name arrive in the
  first fragment, the JSON arguments in later ones; all are ended, in index order, when the
  choice finishes;
* reasoning arrives in a non-standard delta field (``reasoning_content`` for vLLM, DeepSeek
  and llama.cpp; ``reasoning`` for Ollama and OpenRouter) and has no signature to keep;
* a stream that ends without a ``finish_reason`` was cut, and is retried.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from openai.types.chat import ChatCompletionChunk
from openai.types.chat.chat_completion_chunk import ChoiceDelta

from agentkeep.providers._errors import connection_lost
from agentkeep.providers._wire import ToolNames, is_json_object
from agentkeep.providers.retry import AttemptOutcome
from agentkeep.types import (
    Done,
    DoneState,
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
    Usage,
    done_error,
)

_FINISH_STATES: dict[str, DoneState] = {
    "stop": "normal",
    "content_filter": "normal",
    "tool_calls": "tool_call",
    "function_call": "tool_call",
    "length": "length",
}


@dataclass
class _Call:
    call_id: str
    parts: list[str] = field(default_factory=list)


def _reasoning_of(delta: ChoiceDelta) -> str | None:
    for name in ("reasoning_content", "reasoning"):
        value = getattr(delta, name, None)  # extra fields a compatible server adds
        if isinstance(value, str) and value:
            return value
    return None


class ChatStreamMapper:
    """Turns one attempt's chunks into agentkeep events, then its ``Done``."""

    def __init__(self, tool_names: ToolNames) -> None:
        self._names = tool_names
        self._open: str | None = None  # "text" | "reasoning"
        self._parts: list[str] = []
        self._calls: dict[int, _Call] = {}
        self._finish: str | None = None
        self._usage: Usage | None = None
        self._produced = False

    def _close_sequential(self) -> list[StreamEvent]:
        kind, self._open = self._open, None
        text, self._parts = "".join(self._parts), []
        if kind == "text":
            return [TextEnd(text=text)]
        if kind == "reasoning":
            return [ReasoningEnd(text=text)]
        return []

    def _sequential(self, kind: str, delta: str) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        if self._open != kind:
            events.extend(self._close_sequential())
            self._open = kind
            events.append(TextStart() if kind == "text" else ReasoningStart())
        self._parts.append(delta)
        events.append(TextDelta(delta=delta) if kind == "text" else ReasoningDelta(delta=delta))
        return events

    def on_event(self, event: ChatCompletionChunk) -> list[StreamEvent]:
        """The agentkeep events for one chunk."""
        if event.usage is not None:
            details = event.usage.prompt_tokens_details
            self._usage = Usage(
                input=event.usage.prompt_tokens,
                output=event.usage.completion_tokens,
                cache_read=(details.cached_tokens or 0) if details is not None else 0,
            )
        events: list[StreamEvent] = []
        for choice in event.choices[:1]:  # one choice is asked for (n = 1)
            delta = choice.delta
            if (reasoning := _reasoning_of(delta)) is not None:
                self._produced = True
                events.extend(self._sequential("reasoning", reasoning))
            if delta.content:
                self._produced = True
                events.extend(self._sequential("text", delta.content))
            for fragment in delta.tool_calls or ():
                self._produced = True
                events.extend(self._close_sequential())
                call = self._calls.get(fragment.index)
                function = fragment.function
                if call is None:
                    call = self._calls[fragment.index] = _Call(
                        fragment.id or f"call_{fragment.index}"
                    )
                    namespace, name = self._names.resolve(
                        (function.name if function else None) or ""
                    )
                    events.append(
                        ToolCallStart(call_id=call.call_id, name=name, namespace=namespace)
                    )
                if function is not None and function.arguments:
                    call.parts.append(function.arguments)
                    events.append(ToolCallDelta(call_id=call.call_id, delta=function.arguments))
            if choice.finish_reason is not None:
                self._finish = choice.finish_reason
                events.extend(self._close_sequential())
                for index in sorted(self._calls):
                    call = self._calls.pop(index)
                    arguments = "".join(call.parts) or "{}"
                    events.append(
                        ToolCallEnd(
                            call_id=call.call_id,
                            arguments=arguments,
                            incomplete=not is_json_object(arguments),
                        )
                    )
        return events

    def finish(self) -> tuple[list[StreamEvent], AttemptOutcome]:
        """The closing events and outcome once the vendor stream ended."""
        usage = self._usage or Usage(input=0, output=0)  # a server may not report usage
        events: list[StreamEvent] = [TokenUsage(usage=usage)] if self._usage else []
        if self._finish is None:
            return events, connection_lost("the stream ended before a finish_reason")
        if not self._produced:
            info = ProviderErrorInfo(type="empty_response", diagnostics={"finish": self._finish})
            return events, done_error("the model returned an empty response", provider_error=info)
        state = _FINISH_STATES.get(self._finish, "normal")
        tokens = Tokens(input=usage.input, output=usage.output)
        return events, Done(
            state=state, tokens=tokens, end_turn=True if state == "normal" else None
        )
