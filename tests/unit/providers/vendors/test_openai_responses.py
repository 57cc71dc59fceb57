"""OpenAIProvider against a local server speaking the Responses API's real SSE format."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest

from agentkeep.providers.openai_responses import OpenAIProvider
from agentkeep.providers.protocol import CancelToken
from agentkeep.providers.retry import RetryPolicy
from agentkeep.types import (
    AssistantMessage,
    BlockReset,
    BlockStart,
    BlockStop,
    Context,
    Done,
    ImageBlock,
    ModelSessionOptions,
    ReasoningBlock,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    Retrying,
    Selection,
    ServerToolResultBlock,
    StreamEvent,
    TextBlock,
    TextDelta,
    TextEnd,
    TextStart,
    Tokens,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolDescriptor,
    ToolResultEnd,
    ToolResultMessage,
    ToolResultStart,
    Usage,
    UserMessage,
)

API_KEY = "sk-openai-test-not-a-real-key"
ENCRYPTED = "gAAAAABoX1-encrypted+/reasoning==payload"
WEATHER = ToolDescriptor(
    name="get_weather",
    description="Current weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
CLOCK = ToolDescriptor(name="now", namespace="clock", description="The time.")
SEARCH = ToolDescriptor(name="web_search", server={"type": "web_search"})


@pytest.fixture
def provider(server, retry_policy: RetryPolicy) -> Iterator[OpenAIProvider]:
    made = OpenAIProvider(
        api_key=API_KEY, base_url=f"{server.url}/v1", model="gpt-test", retry=retry_policy
    )
    yield made
    made.close()


def run(
    session, context: Context, selection: Selection | None = None, cancel=None
) -> list[StreamEvent]:
    return list(session.stream(context, selection or Selection(), cancel or CancelToken()))


def ask(text: str) -> Context:
    return Context(
        instructions="Be brief.", messages=(UserMessage(content=(TextBlock(text=text),)),)
    )


class Script:
    """Builds a Responses event stream with running sequence numbers."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.output: list[dict] = []

    def add(self, event_type: str, **fields: object) -> Script:
        self.events.append({"type": event_type, "sequence_number": len(self.events), **fields})
        return self

    def created(self) -> Script:
        return self.add("response.created", response=response_object("in_progress", []))

    def message(self, index: int, *chunks: str, phase: str = "final_answer") -> Script:
        item_id = f"msg_{index}"
        added = {
            "id": item_id,
            "type": "message",
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        }
        self.add("response.output_item.added", output_index=index, item=added)
        part = {"type": "output_text", "text": "", "annotations": []}
        self.add(
            "response.content_part.added",
            item_id=item_id,
            output_index=index,
            content_index=0,
            part=part,
        )
        for chunk in chunks:
            self.add(
                "response.output_text.delta",
                item_id=item_id,
                output_index=index,
                content_index=0,
                delta=chunk,
                logprobs=[],
            )
        text = "".join(chunks)
        self.add(
            "response.output_text.done",
            item_id=item_id,
            output_index=index,
            content_index=0,
            text=text,
            logprobs=[],
        )
        done = {
            **added,
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
            "phase": phase,
        }
        self.add("response.output_item.done", output_index=index, item=done)
        self.output.append(done)
        return self

    def reasoning(self, index: int, *summary: str) -> Script:
        item_id = f"rs_{index}"
        self.add(
            "response.output_item.added",
            output_index=index,
            item={"id": item_id, "type": "reasoning", "summary": []},
        )
        for number, text in enumerate(summary):
            part = {"type": "summary_text", "text": ""}
            self.add(
                "response.reasoning_summary_part.added",
                item_id=item_id,
                output_index=index,
                summary_index=number,
                part=part,
            )
            self.add(
                "response.reasoning_summary_text.delta",
                item_id=item_id,
                output_index=index,
                summary_index=number,
                delta=text,
            )
        done = {
            "id": item_id,
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": t} for t in summary],
            "encrypted_content": ENCRYPTED,
        }
        self.add("response.output_item.done", output_index=index, item=done)
        self.output.append(done)
        return self

    def function_added(self, index: int, call_id: str, name: str) -> Script:
        item = {
            "id": f"fc_{index}",
            "type": "function_call",
            "status": "in_progress",
            "arguments": "",
            "call_id": call_id,
            "name": name,
        }
        return self.add("response.output_item.added", output_index=index, item=item)

    def arguments(self, index: int, delta: str) -> Script:
        return self.add(
            "response.function_call_arguments.delta",
            item_id=f"fc_{index}",
            output_index=index,
            delta=delta,
        )

    def function_done(self, index: int, call_id: str, name: str, arguments: str) -> Script:
        self.add(
            "response.function_call_arguments.done",
            item_id=f"fc_{index}",
            output_index=index,
            arguments=arguments,
        )
        item = {
            "id": f"fc_{index}",
            "type": "function_call",
            "status": "completed",
            "arguments": arguments,
            "call_id": call_id,
            "name": name,
        }
        self.output.append(item)
        return self.add("response.output_item.done", output_index=index, item=item)

    def completed(self, input_tokens: int = 50, cached: int = 20, output_tokens: int = 9) -> Script:
        usage = {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 3},
            "total_tokens": input_tokens + output_tokens,
        }
        return self.add(
            "response.completed", response=response_object("completed", self.output, usage)
        )

    def frames(self, server) -> list[bytes]:
        return server.typed_sse(*self.events)


def response_object(
    status: str, output: list[dict], usage: dict | None = None, **extra: object
) -> dict:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1760000000,
        "status": status,
        "model": "gpt-test",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "error": None,
        "incomplete_details": None,
        "usage": usage,
        **extra,
    }


def text_reply(server, text: str = "Hello.") -> object:
    return server.Reply(frames=Script().created().message(0, text).completed().frames(server))


def test_reasoning_text_and_parallel_calls_map_and_the_request_is_exact(server, provider):
    script = (
        Script()
        .created()
        .reasoning(0, "Need weather.", "And time.")
        .function_added(1, "call_A", "get_weather")
        .function_added(2, "call_B", "clock__now")
        .arguments(1, '{"city":')
        .arguments(2, "{}")
        .arguments(1, '"Oslo"}')
        .function_done(2, "call_B", "clock__now", "{}")
        .function_done(1, "call_A", "get_weather", '{"city":"Oslo"}')
        .completed()
    )
    server.queue(server.Reply(frames=script.frames(server)))
    session = provider.open_model_session(
        "agent-1", ModelSessionOptions(instructions="Be brief.", tools=(WEATHER, CLOCK))
    )

    events = run(session, ask("Weather and time?"), Selection(effort="max"))

    reasoning_end = events[5]
    # The vendor item is JSON-equal to the wire item (the SDK's key order); the encrypted
    # content itself is byte for byte.
    assert json.loads(reasoning_end.vendor) == script.output[0]
    reasoning_vendor = reasoning_end.vendor
    assert events == [
        BlockStart(),
        ReasoningStart(),
        ReasoningDelta(delta="Need weather."),
        ReasoningDelta(delta="\n\n"),
        ReasoningDelta(delta="And time."),
        ReasoningEnd(
            text="Need weather.\n\nAnd time.", reasoning=ENCRYPTED, vendor=reasoning_vendor
        ),
        ToolCallStart(call_id="call_A", name="get_weather"),
        ToolCallStart(call_id="call_B", name="now", namespace="clock"),
        ToolCallDelta(call_id="call_A", delta='{"city":'),
        ToolCallDelta(call_id="call_B", delta="{}"),
        ToolCallDelta(call_id="call_A", delta='"Oslo"}'),
        ToolCallEnd(call_id="call_B", arguments="{}"),
        ToolCallEnd(call_id="call_A", arguments='{"city":"Oslo"}'),
        BlockStop(),
        TokenUsage(usage=Usage(input=50, output=9, cache_read=20)),
        Done(state="tool_call", tokens=Tokens(input=50, output=9)),
    ]
    (request,) = server.requests
    assert request.path == "/v1/responses"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.json() == {
        "model": "gpt-test",
        "instructions": "Be brief.",
        "input": [
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "Weather and time?"}],
            }
        ],
        "tools": [
            {
                "type": "function",
                "name": "get_weather",
                "description": "Current weather for a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                "strict": False,
            },
            {
                "type": "function",
                "name": "clock__now",
                "description": "The time.",
                "parameters": {"type": "object", "properties": {}},
                "strict": False,
            },
        ],
        "parallel_tool_calls": True,
        "reasoning": {"effort": "xhigh", "summary": "auto"},
        "include": ["reasoning.encrypted_content"],
        "store": False,
        "prompt_cache_key": "agent-1",
        "stream": True,
    }


def test_reasoning_calls_and_phased_text_replay_byte_for_byte(server, provider):
    script = (
        Script()
        .created()
        .reasoning(0, "Plan.")
        .message(1, "Checking.", phase="commentary")
        .completed()
    )
    server.queue(server.Reply(frames=script.frames(server)), text_reply(server))
    session = provider.open_model_session(
        "agent-1", ModelSessionOptions(instructions="Be brief.", tools=(WEATHER,))
    )

    first = run(session, ask("Weather?"))
    reasoning_end = next(e for e in first if isinstance(e, ReasoningEnd))
    text_end = next(e for e in first if isinstance(e, TextEnd))
    assert json.loads(text_end.vendor) == {"id": "msg_1", "phase": "commentary"}

    replay = Context(
        instructions="Be brief.",
        messages=(
            *ask("Weather?").messages,
            AssistantMessage(
                content=(
                    ReasoningBlock(
                        text=reasoning_end.text,
                        reasoning=reasoning_end.reasoning,
                        vendor=reasoning_end.vendor,
                    ),
                    TextBlock(text=text_end.text, vendor=text_end.vendor),
                    ToolCallBlock(
                        call_id="call_A", name="get_weather", arguments='{"city":"Oslo"}'
                    ),
                )
            ),
            ToolResultMessage(call_id="call_A", content=(TextBlock(text="12°C"),)),
            UserMessage(content=(ImageBlock(data="iVBORw0KGgo=", mime_type="image/png"),)),
        ),
    )
    run(session, replay)

    second = server.requests[1]
    assert f'"encrypted_content":"{ENCRYPTED}"'.encode() in second.body
    assert second.json()["input"][1:] == [
        script.output[0],  # the reasoning item exactly as output_item.done gave it
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Checking."}],
            "phase": "commentary",
        },
        {
            "type": "function_call",
            "call_id": "call_A",
            "name": "get_weather",
            "arguments": '{"city":"Oslo"}',
        },
        {"type": "function_call_output", "call_id": "call_A", "output": "12°C"},
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}],
        },
    ]


def test_a_server_web_search_is_a_server_call_with_a_kept_result(server, provider):
    added = {"id": "ws_1", "type": "web_search_call", "status": "in_progress"}
    done = {
        "id": "ws_1",
        "type": "web_search_call",
        "status": "completed",
        "action": {"type": "search", "query": "oslo"},
    }
    script = Script().created()
    script.add("response.output_item.added", output_index=0, item=added)
    script.add("response.web_search_call.in_progress", output_index=0, item_id="ws_1")
    script.add("response.web_search_call.searching", output_index=0, item_id="ws_1")
    script.add("response.web_search_call.completed", output_index=0, item_id="ws_1")
    script.add("response.output_item.done", output_index=0, item=done)
    script.output.append(done)
    script.message(1, "Mild.").completed()
    server.queue(server.Reply(frames=script.frames(server)), text_reply(server))
    session = provider.open_model_session(
        "a", ModelSessionOptions(instructions="", tools=(SEARCH,))
    )

    events = run(session, ask("Weather?"))

    vendor = events[3].vendor
    assert json.loads(vendor) == done
    assert events[1:6] == [
        ToolCallStart(call_id="ws_1", name="web_search_call", server=True),
        ToolCallEnd(call_id="ws_1", arguments='{"type":"search","query":"oslo"}'),
        ToolResultStart(call_id="ws_1", vendor=vendor),
        ToolResultEnd(call_id="ws_1", vendor=vendor),
        TextStart(),
    ]
    assert events[-1] == Done(state="normal", tokens=Tokens(input=50, output=9), end_turn=True)
    assert server.requests[0].json()["tools"] == [{"type": "web_search"}]

    kept = AssistantMessage(
        content=(
            ToolCallBlock(call_id="ws_1", name="web_search_call", arguments="{}", server=True),
            ServerToolResultBlock(call_id="ws_1", vendor=vendor),
            TextBlock(text="Mild."),
        )
    )
    run(session, Context(instructions="", messages=(*ask("Weather?").messages, kept)))
    assert server.requests[1].json()["input"][1] == done


def test_an_incomplete_response_ends_with_length(server, provider):
    script = Script().created().message(0, "Part")
    script.add(
        "response.incomplete",
        response=response_object(
            "incomplete",
            script.output,
            {"input_tokens": 5, "output_tokens": 4, "total_tokens": 9},
            incomplete_details={"reason": "max_output_tokens"},
        ),
    )
    server.queue(server.Reply(frames=script.frames(server)))
    events = run(provider.open_model_session("a", ModelSessionOptions(instructions="")), ask("go"))
    assert events[-2:] == [
        TokenUsage(usage=Usage(input=5, output=4)),
        Done(state="length", tokens=Tokens(input=5, output=4)),
    ]


def test_a_rate_limit_is_retried_with_a_reported_backoff(server, provider, sleeps):
    body = {
        "error": {
            "message": "Rate limit reached",
            "type": "requests",
            "code": "rate_limit_exceeded",
        }
    }
    server.queue(
        server.Reply(status=429, json_body=body, headers={"x-ratelimit-reset-requests": "0s"}),
        text_reply(server),
    )

    events = run(provider.open_model_session("a", ModelSessionOptions(instructions="")), ask("go"))

    assert events[0] == Retrying(
        attempt=1,
        reason="rate limited: Rate limit reached",
        delay_seconds=sleeps.delays[0],
        error_type="rate_limit",
    )
    assert events[-1].state == "normal"
    assert len(server.requests) == 2


def test_server_overload_until_retries_run_out_ends_in_an_error_done(server, provider, sleeps):
    for _ in range(4):
        server.queue(
            server.Reply(
                status=503, json_body={"error": {"message": "overloaded", "type": "server_error"}}
            )
        )
    events = run(provider.open_model_session("a", ModelSessionOptions(instructions="")), ask("go"))
    assert [e.attempt for e in events if isinstance(e, Retrying)] == [1, 2, 3]
    assert events[-1].state == "error"
    assert events[-1].provider_error.type == "server_overloaded"
    assert events[-1].provider_error.diagnostics["attempts"] == 4


def test_a_failed_response_mid_stream_is_rewound_and_retried(server, provider):
    script = Script().created()
    script.add(
        "response.output_item.added",
        output_index=0,
        item={
            "id": "msg_0",
            "type": "message",
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        },
    )
    script.add(
        "response.output_text.delta",
        item_id="msg_0",
        output_index=0,
        content_index=0,
        delta="Hal",
        logprobs=[],
    )
    failed = response_object(
        "failed", [], error={"code": "server_error", "message": "The server had an error."}
    )
    script.add("response.failed", response=failed)
    server.queue(server.Reply(frames=script.frames(server)), text_reply(server, "Whole."))

    events = run(provider.open_model_session("a", ModelSessionOptions(instructions="")), ask("go"))

    assert events[:4] == [BlockStart(), TextStart(), TextDelta(delta="Hal"), BlockReset()]
    assert events[4].reason == "server error: The server had an error."
    assert TextEnd(text="Whole.", vendor='{"id":"msg_0","phase":"final_answer"}') in events
    assert events[-1].state == "normal"


def test_a_mid_stream_disconnect_is_rewound_and_retried(server, provider):
    frames = Script().created().message(0, "Hal", "f").completed().frames(server)
    server.queue(server.Reply(frames=frames, cut_after=4), text_reply(server, "Whole."))
    events = run(provider.open_model_session("a", ModelSessionOptions(instructions="")), ask("go"))
    reset = events.index(BlockReset())
    assert events[:reset] == [BlockStart(), TextStart(), TextDelta(delta="Hal")]
    assert events[reset + 1].reason.startswith("connection lost")
    assert events[-1].state == "normal"


@pytest.mark.parametrize(
    ("status", "body", "kind", "error_type"),
    [
        (
            401,
            {
                "error": {
                    "message": "Incorrect API key provided",
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                }
            },
            "internal_error",
            "authentication",
        ),
        (
            400,
            {
                "error": {
                    "message": "Your input exceeds the context window of this model.",
                    "type": "invalid_request_error",
                    "code": "context_length_exceeded",
                }
            },
            "context_overflow",
            "unclassified",
        ),
        (
            429,
            {
                "error": {
                    "message": "You exceeded your current quota.",
                    "type": "insufficient_quota",
                    "code": "insufficient_quota",
                }
            },
            "billing_error",
            "out_of_tokens",
        ),
    ],
)
def test_unretryable_errors_are_classified(
    server, provider, sleeps, status, body, kind, error_type
):
    server.queue(server.Reply(status=status, json_body=body))
    (done,) = run(provider.open_model_session("a", ModelSessionOptions(instructions="")), ask("go"))
    assert (done.state, done.kind, done.provider_error.type) == ("error", kind, error_type)
    assert sleeps.delays == []


def test_cancelling_mid_stream_closes_the_connection_and_ends_cancelled(server, provider):
    frames = Script().created().message(0, "Hel", "lo").completed().frames(server)
    server.queue(server.Reply(frames=frames, hold_after=4))
    session = provider.open_model_session("a", ModelSessionOptions(instructions=""))
    cancel = CancelToken()
    seen: list[StreamEvent] = []
    first_delta = threading.Event()

    def consume() -> None:
        for event in session.stream(ask("go"), Selection(), cancel):
            seen.append(event)
            if isinstance(event, TextDelta):
                first_delta.set()

    reader = threading.Thread(target=consume)
    reader.start()
    assert first_delta.wait(5)
    assert server.holding.wait(5)
    cancel.cancel()
    reader.join(5)

    assert not reader.is_alive()
    assert server.client_gone.wait(5)
    assert seen[-1] == Done(state="cancelled")
    assert sum(isinstance(e, Done) for e in seen) == 1
