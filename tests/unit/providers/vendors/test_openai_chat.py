"""OpenAICompatibleProvider against a local server speaking Chat Completions' real SSE format."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from agentkeep.providers.openai_chat import OpenAICompatibleProvider
from agentkeep.providers.protocol import CancelToken
from agentkeep.providers.retry import RetryPolicy
from agentkeep.types import (
    AssistantMessage,
    BlockReset,
    BlockStart,
    BlockStop,
    Context,
    Done,
    ModelSessionOptions,
    ReasoningBlock,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    Retrying,
    Selection,
    StreamEvent,
    SystemMessage,
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
    ToolResultMessage,
    Usage,
    UserMessage,
)

WEATHER = ToolDescriptor(
    name="get_weather",
    description="Current weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
CLOCK = ToolDescriptor(name="now", namespace="clock", description="The time.")


@pytest.fixture
def provider(server, retry_policy: RetryPolicy, monkeypatch) -> Iterator[OpenAICompatibleProvider]:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    made = OpenAICompatibleProvider(
        base_url=f"{server.url}/v1", model="qwen3-8b", retry=retry_policy
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


def chunk(delta: dict | None = None, finish: str | None = None, usage: dict | None = None) -> dict:
    choices = (
        []
        if delta is None
        else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
    )
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1760000000,
        "model": "qwen3-8b",
        "system_fingerprint": None,
        "choices": choices,
        "usage": usage,
    }


def frames(server, *chunks: dict, done: bool = True) -> list[bytes]:
    out = [server.sse(None, c) for c in chunks]
    return [*out, server.sse(None, "[DONE]")] if done else out


USAGE = {
    "prompt_tokens": 30,
    "completion_tokens": 8,
    "total_tokens": 38,
    "prompt_tokens_details": {"cached_tokens": 16},
}


def text_reply(server, text: str = "Hello.") -> object:
    return server.Reply(
        frames=frames(
            server,
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": text}),
            chunk({}, finish="stop"),
            chunk(None, usage=USAGE),
        )
    )


def test_reasoning_then_text_and_the_request_is_exact(server, provider):
    server.queue(
        server.Reply(
            frames=frames(
                server,
                chunk({"role": "assistant", "content": None, "reasoning_content": "Short "}),
                chunk({"reasoning_content": "answer."}),
                chunk({"content": "Hel"}),
                chunk({"content": "lo."}),
                chunk({}, finish="stop"),
                chunk(None, usage=USAGE),
            )
        )
    )
    session = provider.open_model_session(
        "a", ModelSessionOptions(instructions="Be brief.", tools=(WEATHER, CLOCK))
    )

    events = run(session, ask("Hi"), Selection(effort="medium"))

    assert events == [
        BlockStart(),
        ReasoningStart(),
        ReasoningDelta(delta="Short "),
        ReasoningDelta(delta="answer."),
        ReasoningEnd(text="Short answer."),
        TextStart(),
        TextDelta(delta="Hel"),
        TextDelta(delta="lo."),
        TextEnd(text="Hello."),
        BlockStop(),
        TokenUsage(usage=Usage(input=30, output=8, cache_read=16)),
        Done(state="normal", tokens=Tokens(input=30, output=8), end_turn=True),
    ]
    (request,) = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.json() == {
        "model": "qwen3-8b",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Current weather for a city.",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                },
            },
            {
                "type": "function",
                "function": {
                    "name": "clock__now",
                    "description": "The time.",
                    "parameters": {"type": "object", "properties": {}},
                },
            },
        ],
        "reasoning_effort": "medium",
        "stream_options": {"include_usage": True},
        "stream": True,
    }


def test_parallel_tool_calls_stream_their_arguments_and_replay(server, provider):
    first_call = {
        "index": 0,
        "id": "call_A",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    second_call = {
        "index": 1,
        "id": "call_B",
        "type": "function",
        "function": {"name": "clock__now", "arguments": ""},
    }
    server.queue(
        server.Reply(
            frames=frames(
                server,
                chunk({"role": "assistant", "content": "Checking."}),
                chunk({"tool_calls": [first_call]}),
                chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}),
                chunk({"tool_calls": [second_call]}),
                chunk({"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]}),
                chunk({"tool_calls": [{"index": 0, "function": {"arguments": ' "Oslo"}'}}]}),
                chunk({}, finish="tool_calls"),
                chunk(None, usage=USAGE),
            )
        ),
        text_reply(server),
    )
    session = provider.open_model_session(
        "a", ModelSessionOptions(instructions="Be brief.", tools=(WEATHER, CLOCK))
    )

    events = run(session, ask("Weather and time?"))

    assert events[1:14] == [
        TextStart(),
        TextDelta(delta="Checking."),
        TextEnd(text="Checking."),
        ToolCallStart(call_id="call_A", name="get_weather"),
        ToolCallDelta(call_id="call_A", delta='{"city":'),
        ToolCallStart(call_id="call_B", name="now", namespace="clock"),
        ToolCallDelta(call_id="call_B", delta="{}"),
        ToolCallDelta(call_id="call_A", delta=' "Oslo"}'),
        ToolCallEnd(call_id="call_A", arguments='{"city": "Oslo"}'),
        ToolCallEnd(call_id="call_B", arguments="{}"),
        BlockStop(),
        TokenUsage(usage=Usage(input=30, output=8, cache_read=16)),
        Done(state="tool_call", tokens=Tokens(input=30, output=8)),
    ]

    replay = Context(
        instructions="Be brief.",
        messages=(
            *ask("Weather and time?").messages,
            AssistantMessage(
                content=(
                    ReasoningBlock(text="not replayed"),
                    TextBlock(text="Checking."),
                    ToolCallBlock(
                        call_id="call_A", name="get_weather", arguments='{"city": "Oslo"}'
                    ),
                    ToolCallBlock(call_id="call_B", name="now", namespace="clock", arguments="{}"),
                )
            ),
            ToolResultMessage(call_id="call_A", content=(TextBlock(text="12°C"),)),
            ToolResultMessage(call_id="call_B", content=(TextBlock(text="09:00"),)),
            SystemMessage(content=(TextBlock(text="Be quick."),)),
        ),
    )
    run(session, replay)

    assert server.requests[1].json()["messages"][2:] == [
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "call_A",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                },
                {
                    "id": "call_B",
                    "type": "function",
                    "function": {"name": "clock__now", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_A", "content": "12°C"},
        {"role": "tool", "tool_call_id": "call_B", "content": "09:00"},
        {"role": "user", "content": "<system-message>\nBe quick.\n</system-message>"},
    ]


def test_length_finish_ends_with_length(server, provider):
    server.queue(
        server.Reply(
            frames=frames(
                server,
                chunk({"content": "Par"}),
                chunk({}, finish="length"),
                chunk(None, usage=USAGE),
            )
        )
    )
    events = run(provider.open_model_session("a", ModelSessionOptions(instructions="")), ask("go"))
    assert events[-1] == Done(state="length", tokens=Tokens(input=30, output=8))


def test_a_rate_limit_is_retried_with_a_reported_backoff(server, provider, sleeps):
    body = {"error": {"message": "Too many requests", "type": "rate_limit", "code": 429}}
    server.queue(
        server.Reply(status=429, json_body=body, headers={"retry-after": "0"}), text_reply(server)
    )
    events = run(provider.open_model_session("a", ModelSessionOptions(instructions="")), ask("go"))
    assert events[0] == Retrying(
        attempt=1,
        reason="rate limited: Too many requests",
        delay_seconds=sleeps.delays[0],
        error_type="rate_limit",
    )
    assert events[-1].state == "normal"


def test_an_error_object_in_the_stream_is_classified_and_retried(server, provider):
    error = {"error": {"message": "CUDA out of memory", "type": "server_error", "code": 500}}
    server.queue(
        server.Reply(frames=frames(server, chunk({"content": "Hal"}), error, done=False)),
        text_reply(server, "Whole."),
    )
    events = run(provider.open_model_session("a", ModelSessionOptions(instructions="")), ask("go"))
    assert events[:4] == [BlockStart(), TextStart(), TextDelta(delta="Hal"), BlockReset()]
    assert events[4].reason == "server error: CUDA out of memory"
    assert TextEnd(text="Whole.") in events


def test_overload_until_retries_run_out_ends_in_an_error_done(server, provider):
    for _ in range(4):
        server.queue(server.Reply(status=503, json_body={"error": {"message": "busy"}}))
    events = run(provider.open_model_session("a", ModelSessionOptions(instructions="")), ask("go"))
    assert events[-1].provider_error.type == "server_overloaded"
    assert events[-1].provider_error.diagnostics["attempts"] == 4


def test_a_mid_stream_disconnect_is_rewound_and_retried(server, provider):
    cut = frames(
        server, chunk({"content": "Hal"}), chunk({"content": "f"}), chunk({}, finish="stop")
    )
    server.queue(server.Reply(frames=cut, cut_after=1), text_reply(server, "Whole."))
    events = run(provider.open_model_session("a", ModelSessionOptions(instructions="")), ask("go"))
    reset = events.index(BlockReset())
    assert events[:reset] == [BlockStart(), TextStart(), TextDelta(delta="Hal")]
    assert events[reset + 1].reason.startswith("connection lost")
    assert events[-1].state == "normal"


def test_cancelling_mid_stream_closes_the_connection_and_ends_cancelled(server, provider):
    held = frames(
        server, chunk({"content": "Hel"}), chunk({"content": "lo"}), chunk({}, finish="stop")
    )
    server.queue(server.Reply(frames=held, hold_after=1))
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
