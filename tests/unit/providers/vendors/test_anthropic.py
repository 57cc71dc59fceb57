"""AnthropicProvider against a local server speaking the Messages API's real SSE format."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest

from agentkeep.providers.anthropic import AnthropicProvider
from agentkeep.providers.protocol import CancelToken
from agentkeep.providers.retry import RetryPolicy
from agentkeep.types import (
    AssistantMessage,
    BlockReset,
    BlockStart,
    BlockStop,
    CompactionCompleted,
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

API_KEY = "sk-ant-test-not-a-real-key"
SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+/Z0n3B4f/8a=="
WEATHER = ToolDescriptor(
    name="get_weather",
    description="Current weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)
CLOCK = ToolDescriptor(name="now", namespace="clock", description="The time.")
SEARCH = ToolDescriptor(name="web_search", server={"type": "web_search_20250305", "max_uses": 2})


@pytest.fixture
def provider(server, retry_policy: RetryPolicy) -> Iterator[AnthropicProvider]:
    made = AnthropicProvider(
        api_key=API_KEY,
        base_url=server.url,
        model="claude-test",
        max_tokens=1000,
        retry=retry_policy,
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


def message_start(input_tokens: int = 10, cache_read: int = 0, cache_write: int = 0) -> dict:
    return {
        "type": "message_start",
        "message": {
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": "claude-test",
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": input_tokens,
                "cache_creation_input_tokens": cache_write,
                "cache_read_input_tokens": cache_read,
                "output_tokens": 1,
            },
        },
    }


def text_block(index: int, *chunks: str) -> list[dict]:
    return [
        {
            "type": "content_block_start",
            "index": index,
            "content_block": {"type": "text", "text": ""},
        },
        *(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "text_delta", "text": c},
            }
            for c in chunks
        ),
        {"type": "content_block_stop", "index": index},
    ]


def message_end(stop_reason: str, output_tokens: int) -> list[dict]:
    return [
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": output_tokens},
        },
        {"type": "message_stop"},
    ]


def text_reply(server, text: str = "Hello there.", **reply) -> object:
    events = [message_start(), *text_block(0, text), *message_end("end_turn", 5)]
    return server.Reply(frames=server.typed_sse(*events), **reply)


def test_text_streams_as_one_committed_block_and_the_request_carries_cache_markers(
    server, provider
):
    frames = server.typed_sse(
        message_start(input_tokens=7, cache_read=100, cache_write=20),
        *text_block(0, "Hel", "lo!"),
        *message_end("end_turn", 12),
    )
    frames.insert(2, server.sse("ping", {"type": "ping"}))  # pings are part of the real stream
    server.queue(server.Reply(frames=frames))
    session = provider.open_model_session("agent-1", ModelSessionOptions(instructions="Be brief."))

    events = run(session, ask("Hi"))

    assert events == [
        BlockStart(),
        TextStart(),
        TextDelta(delta="Hel"),
        TextDelta(delta="lo!"),
        TextEnd(text="Hello!"),
        BlockStop(),
        TokenUsage(usage=Usage(input=127, output=12, cache_read=100, cache_write=20)),
        Done(state="normal", tokens=Tokens(input=127, output=12), end_turn=True),
    ]
    (request,) = server.requests
    assert request.path == "/v1/messages"
    sent_key = request.headers.get("x-api-key") or request.headers["authorization"].removeprefix(
        "Bearer "
    )
    assert sent_key == API_KEY  # the SDK's header scheme, whichever this version uses
    assert request.headers.get("x-stainless-retry-count", "0") == "0"
    assert request.json() == {
        "model": "claude-test",
        "max_tokens": 1000,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}],
            }
        ],
        "stream": True,
    }


def test_the_api_key_is_never_in_a_repr(provider):
    session = provider.open_model_session("agent-1", ModelSessionOptions(instructions=""))
    assert API_KEY not in repr(provider)
    assert API_KEY not in repr(session)


def test_thinking_and_parallel_tool_calls_map_and_replay_byte_for_byte(server, provider):
    # Two tool calls whose streamed JSON arguments interleave (blocks are keyed by index).
    events = [
        message_start(),
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": ""},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "Two "},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "calls."},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "signature_delta", "signature": SIGNATURE},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {
                "type": "tool_use",
                "id": "toolu_A",
                "name": "get_weather",
                "input": {},
            },
        },
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {
                "type": "tool_use",
                "id": "toolu_B",
                "name": "clock__now",
                "input": {},
            },
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"ci'},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": 'ty": "Oslo"}'},
        },
        {"type": "content_block_stop", "index": 2},
        {"type": "content_block_stop", "index": 1},
        *message_end("tool_use", 40),
    ]
    server.queue(server.Reply(frames=server.typed_sse(*events)), text_reply(server, "Done."))
    session = provider.open_model_session(
        "agent-1", ModelSessionOptions(instructions="Be brief.", tools=(WEATHER, CLOCK))
    )

    first = run(session, ask("Weather and time?"), Selection(effort="low"))

    assert first[:14] == [
        BlockStart(),
        ReasoningStart(),
        ReasoningDelta(delta="Two "),
        ReasoningDelta(delta="calls."),
        ReasoningEnd(text="Two calls.", reasoning=SIGNATURE),
        ToolCallStart(call_id="toolu_A", name="get_weather"),
        ToolCallStart(call_id="toolu_B", name="now", namespace="clock"),
        ToolCallDelta(call_id="toolu_A", delta='{"ci'),
        ToolCallDelta(call_id="toolu_A", delta='ty": "Oslo"}'),
        ToolCallEnd(call_id="toolu_B", arguments="{}"),
        ToolCallEnd(call_id="toolu_A", arguments='{"city": "Oslo"}'),
        BlockStop(),
        TokenUsage(usage=Usage(input=10, output=40)),
        Done(state="tool_call", tokens=Tokens(input=10, output=40)),
    ]
    assert server.requests[0].json()["thinking"] == {"type": "adaptive"}
    assert server.requests[0].json()["output_config"] == {"effort": "low"}

    replay = Context(
        instructions="Be brief.",
        messages=(
            *ask("Weather and time?").messages,
            AssistantMessage(
                content=(
                    ReasoningBlock(text="Two calls.", reasoning=SIGNATURE),
                    ToolCallBlock(
                        call_id="toolu_A", name="get_weather", arguments='{"city": "Oslo"}'
                    ),
                    ToolCallBlock(call_id="toolu_B", name="now", namespace="clock", arguments="{}"),
                )
            ),
            ToolResultMessage(call_id="toolu_A", content=(TextBlock(text="12°C"),)),
            ToolResultMessage(
                call_id="toolu_B", content=(TextBlock(text="no clock"),), is_error=True
            ),
        ),
    )
    run(session, replay, Selection(effort="low"))

    second = server.requests[1]
    assert f'"signature":"{SIGNATURE}"'.encode() in second.body  # byte for byte on the wire
    body = second.json()
    assert body["tools"] == [
        {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
        {
            "name": "clock__now",
            "description": "The time.",
            "input_schema": {"type": "object", "properties": {}},
            "cache_control": {"type": "ephemeral"},
        },
    ]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather and time?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Two calls.", "signature": SIGNATURE},
                {
                    "type": "tool_use",
                    "id": "toolu_A",
                    "name": "get_weather",
                    "input": {"city": "Oslo"},
                },
                {"type": "tool_use", "id": "toolu_B", "name": "clock__now", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_A",
                    "content": [{"type": "text", "text": "12°C"}],
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_B",
                    "content": [{"type": "text", "text": "no clock"}],
                    "is_error": True,
                    "cache_control": {"type": "ephemeral"},
                },
            ],
        },
    ]


WEB_RESULT = {
    "type": "web_search_tool_result",
    "tool_use_id": "srvtoolu_01",
    "content": [
        {
            "type": "web_search_result",
            "title": "Oslo weather",
            "url": "https://example.org/oslo",
            "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1Mi1m",
            "page_age": None,
        }
    ],
}
CITATION = {
    "type": "web_search_result_location",
    "cited_text": "Mild today",
    "url": "https://example.org/oslo",
    "title": "Oslo weather",
    "encrypted_index": "Eo8BCioIAhgBIiQyYjQ0OWJmZi1lNm",
}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIw"}


def test_server_tool_calls_and_results_are_kept_and_replayed_verbatim(server, provider):
    events = [
        message_start(),
        {"type": "content_block_start", "index": 0, "content_block": REDACTED},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {
                "type": "server_tool_use",
                "id": "srvtoolu_01",
                "name": "web_search",
                "input": {},
            },
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"query": "oslo weather"}'},
        },
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2, "content_block": WEB_RESULT},
        {"type": "content_block_stop", "index": 2},
        *text_block(3, "Mild.")[:2],
        {
            "type": "content_block_delta",
            "index": 3,
            "delta": {"type": "citations_delta", "citation": CITATION},
        },
        text_block(3)[-1],
        *message_end("end_turn", 30),
    ]
    server.queue(server.Reply(frames=server.typed_sse(*events)), text_reply(server))
    session = provider.open_model_session(
        "agent-1", ModelSessionOptions(instructions="", tools=(SEARCH,))
    )

    got = run(session, ask("Weather?"))

    redacted_end = next(e for e in got if isinstance(e, ReasoningEnd))
    assert redacted_end.reasoning == REDACTED["data"]
    start = next(e for e in got if isinstance(e, ToolCallStart))
    assert (start.call_id, start.name, start.server) == ("srvtoolu_01", "web_search", True)
    assert ToolCallEnd(call_id="srvtoolu_01", arguments='{"query": "oslo weather"}') in got
    result_start = next(e for e in got if isinstance(e, ToolResultStart))
    assert json.loads(result_start.vendor or "") == WEB_RESULT
    result_end = next(e for e in got if isinstance(e, ToolResultEnd))
    assert result_end.content == (TextBlock(text="Oslo weather <https://example.org/oslo>"),)
    assert result_end.vendor == result_start.vendor
    text_end = next(e for e in got if isinstance(e, TextEnd))
    assert json.loads(text_end.vendor) == {"citations": [CITATION]}
    assert got[-1] == Done(state="normal", tokens=Tokens(input=10, output=30), end_turn=True)
    assert server.requests[0].json()["tools"] == [
        {
            "name": "web_search",
            "type": "web_search_20250305",
            "max_uses": 2,
            "cache_control": {"type": "ephemeral"},
        }
    ]

    kept = AssistantMessage(
        content=(
            ReasoningBlock(reasoning=redacted_end.reasoning, vendor=redacted_end.vendor),
            ToolCallBlock(
                call_id="srvtoolu_01",
                name="web_search",
                arguments='{"query": "oslo weather"}',
                server=True,
                vendor=start.vendor,
            ),
            ServerToolResultBlock(
                call_id="srvtoolu_01", content=result_end.content, vendor=result_start.vendor
            ),
            TextBlock(text="Mild.", vendor=text_end.vendor),
        )
    )
    run(
        session,
        Context(
            instructions="", messages=(*ask("Weather?").messages, kept, *ask("Thanks").messages)
        ),
    )

    assert server.requests[1].json()["messages"][1] == {
        "role": "assistant",
        "content": [
            REDACTED,
            {
                "type": "server_tool_use",
                "id": "srvtoolu_01",
                "name": "web_search",
                "input": {"query": "oslo weather"},
            },
            WEB_RESULT,
            {"type": "text", "text": "Mild.", "citations": [CITATION]},
        ],
    }


def test_budgeted_thinking_raises_max_tokens_above_the_budget(server, retry_policy):
    server.queue(text_reply(server), text_reply(server))
    provider = AnthropicProvider(
        api_key=API_KEY,
        base_url=server.url,
        model="claude-test",
        max_tokens=1000,
        thinking_mode="budget",
        retry=retry_policy,
    )
    try:
        session = provider.open_model_session("a", ModelSessionOptions(instructions=""))
        run(session, ask("go"), Selection(effort="low"))
        run(session, ask("go"), Selection(effort="off"))
    finally:
        provider.close()
    first, second = (request.json() for request in server.requests)
    assert (first["thinking"], first["max_tokens"]) == (
        {"type": "enabled", "budget_tokens": 2048},
        6144,
    )
    assert (second["thinking"], second["max_tokens"]) == ({"type": "disabled"}, 1000)


def test_the_family_prefix_of_a_selected_model_is_not_sent(server, provider):
    server.queue(text_reply(server))
    run(
        provider.open_model_session("a", ModelSessionOptions(instructions="")),
        ask("go"),
        Selection(model="anthropic/claude-x"),
    )
    assert server.requests[0].json()["model"] == "claude-x"


def test_images_in_user_content_are_sent_as_base64_sources(server, provider):
    server.queue(text_reply(server))
    session = provider.open_model_session("agent-1", ModelSessionOptions(instructions=""))
    image = ImageBlock(data="iVBORw0KGgo=", mime_type="image/png")
    run(
        session,
        Context(instructions="", messages=(UserMessage(content=(TextBlock(text="What?"), image)),)),
    )

    body = server.requests[0].json()
    assert "system" not in body
    assert body["messages"][0]["content"][1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
        "cache_control": {"type": "ephemeral"},
    }


@pytest.mark.parametrize(
    ("stop_reason", "state", "end_turn"),
    [("max_tokens", "length", None), ("pause_turn", "normal", False), ("refusal", "normal", True)],
)
def test_stop_reasons_map_to_done_states(server, provider, stop_reason, state, end_turn):
    events = [message_start(), *text_block(0, "x"), *message_end(stop_reason, 3)]
    server.queue(server.Reply(frames=server.typed_sse(*events)))
    done = run(provider.open_model_session("a", ModelSessionOptions(instructions="")), ask("go"))[
        -1
    ]
    assert done == Done(state=state, tokens=Tokens(input=10, output=3), end_turn=end_turn)


def overloaded_body() -> dict:
    return {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def test_a_rate_limit_is_retried_after_a_reported_backoff(server, provider, sleeps):
    server.queue(
        server.Reply(
            status=429,
            json_body={
                "type": "error",
                "error": {"type": "rate_limit_error", "message": "slow down"},
            },
            headers={"retry-after": "0", "request-id": "req_1"},
        ),
        text_reply(server),
    )
    events = run(provider.open_model_session("a", ModelSessionOptions(instructions="")), ask("go"))

    assert events[0] == Retrying(
        attempt=1,
        reason="rate limited: slow down",
        delay_seconds=sleeps.delays[0],
        error_type="rate_limit",
    )
    assert 0.18 <= sleeps.delays[0] < 0.22  # 200 ms × U[0.9, 1.1)
    assert events[-1].state == "normal"
    assert BlockReset() not in events  # nothing had streamed before the 429
    assert len(server.requests) == 2


def test_overloaded_until_retries_run_out_ends_in_an_error_done(server, provider, sleeps):
    for _ in range(4):
        server.queue(server.Reply(status=529, json_body=overloaded_body()))
    events = run(provider.open_model_session("a", ModelSessionOptions(instructions="")), ask("go"))

    assert [e.attempt for e in events if isinstance(e, Retrying)] == [1, 2, 3]
    assert len(sleeps.delays) == 3
    assert sleeps.delays[1] > sleeps.delays[0] * 1.5  # exponential
    done = events[-1]
    assert done.state == "error"
    assert done.kind == "internal_error"
    assert done.provider_error.type == "server_overloaded"
    assert done.provider_error.diagnostics["attempts"] == 4
    assert len(server.requests) == 4


def test_an_error_event_mid_stream_rewinds_the_attempt_and_retries(server, provider):
    partial = server.typed_sse(message_start(), *text_block(0, "Hal")[:2])
    error = server.sse("error", overloaded_body())
    server.queue(server.Reply(frames=[*partial, error]), text_reply(server, "Hello."))

    events = run(provider.open_model_session("a", ModelSessionOptions(instructions="")), ask("go"))

    assert events[:5] == [
        BlockStart(),
        TextStart(),
        TextDelta(delta="Hal"),
        BlockReset(),
        events[4],
    ]
    assert isinstance(events[4], Retrying)
    assert events[4].reason.startswith("server overloaded")
    assert TextEnd(text="Hello.") in events
    assert events[-1].state == "normal"


def test_a_mid_stream_disconnect_is_rewound_and_retried(server, provider):
    frames = server.typed_sse(message_start(), *text_block(0, "Hal", "f"))
    server.queue(server.Reply(frames=frames, cut_after=3), text_reply(server, "Whole."))

    events = run(provider.open_model_session("a", ModelSessionOptions(instructions="")), ask("go"))

    reset = events.index(BlockReset())
    assert events[:reset] == [BlockStart(), TextStart(), TextDelta(delta="Hal")]
    assert isinstance(events[reset + 1], Retrying)
    assert events[reset + 1].reason.startswith("connection lost")
    assert events[-2:] == [
        events[-2],
        Done(state="normal", tokens=Tokens(input=10, output=5), end_turn=True),
    ]
    assert len(server.requests) == 2


@pytest.mark.parametrize(
    ("status", "message", "kind", "error_type"),
    [
        (401, "invalid x-api-key", "internal_error", "authentication"),
        (
            400,
            "prompt is too long: 210000 tokens > 200000 maximum",
            "context_overflow",
            "unclassified",
        ),
        (
            400,
            "Your credit balance is too low to access the Anthropic API.",
            "billing_error",
            "out_of_tokens",
        ),
        (400, "messages: at least one message is required", "internal_error", "unclassified"),
    ],
)
def test_unretryable_errors_are_classified(
    server, provider, sleeps, status, message, kind, error_type
):
    error_types = {401: "authentication_error", 400: "invalid_request_error"}
    body = {"type": "error", "error": {"type": error_types[status], "message": message}}
    server.queue(server.Reply(status=status, json_body=body))

    (done,) = run(provider.open_model_session("a", ModelSessionOptions(instructions="")), ask("go"))

    assert (done.state, done.kind, done.provider_error.type) == ("error", kind, error_type)
    assert done.message == message
    assert sleeps.delays == []


def test_rate_limit_exhaustion_reports_when_the_limit_resets(server, sleeps):
    reset = "2030-01-01T00:00:00Z"
    body = {"type": "error", "error": {"type": "rate_limit_error", "message": "limit"}}
    server.queue(
        server.Reply(
            status=429, json_body=body, headers={"anthropic-ratelimit-tokens-reset": reset}
        )
    )
    provider = AnthropicProvider(
        api_key=API_KEY, base_url=server.url, retry=RetryPolicy(max_retries=0, sleep=sleeps)
    )
    try:
        (done,) = run(
            provider.open_model_session("a", ModelSessionOptions(instructions="")), ask("go")
        )
    finally:
        provider.close()
    assert done.provider_error.type == "rate_limit"
    assert done.provider_error.reset_at_ms == 1893456000000


def test_cancelling_mid_stream_closes_the_connection_and_ends_cancelled(server, provider):
    frames = server.typed_sse(message_start(), *text_block(0, "Hel", "lo"))
    server.queue(server.Reply(frames=frames, hold_after=3))
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
    assert server.holding.wait(5)  # the reader is now blocked on a socket that says nothing
    cancel.cancel()
    reader.join(5)

    assert not reader.is_alive()
    assert server.client_gone.wait(5)
    assert seen[-1] == Done(state="cancelled")
    assert sum(isinstance(e, Done) for e in seen) == 1


def test_cancelling_before_the_response_headers_returns_at_once(server, provider):
    release = threading.Event()
    frames = server.typed_sse(message_start(), *text_block(0, "late"))
    server.queue(server.Reply(frames=frames, hold_after=0, release_headers=release))
    session = provider.open_model_session("a", ModelSessionOptions(instructions=""))
    cancel = CancelToken()
    seen: list[StreamEvent] = []
    reader = threading.Thread(
        target=lambda: seen.extend(session.stream(ask("go"), Selection(), cancel))
    )
    reader.start()
    assert server.received.wait(5)  # the request is out; its headers are not
    cancel.cancel()
    reader.join(5)

    assert not reader.is_alive()
    assert seen == [Done(state="cancelled")]
    release.set()  # the server answers late: the abandoned response is closed on arrival
    assert server.client_gone.wait(5)


def test_closing_an_unfinished_stream_closes_its_connection_and_frees_the_session(server, provider):
    frames = server.typed_sse(message_start(), *text_block(0, "Hel", "lo"))
    server.queue(server.Reply(frames=frames, hold_after=3), text_reply(server))
    session = provider.open_model_session("a", ModelSessionOptions(instructions=""))
    events = session.stream(ask("go"), Selection(), CancelToken())
    while not isinstance(next(events), TextDelta):
        pass

    events.close()  # what the loop does to a stream it stops reading

    assert server.client_gone.wait(5)
    assert run(session, ask("again"))[-1].state == "normal"


def test_cancelling_during_a_retry_wait_ends_cancelled_without_another_request(server):
    cancel = CancelToken()

    def cancelling_sleep(delay_seconds: float, token: CancelToken) -> bool:
        token.cancel()
        return token.wait_cancelled(delay_seconds)

    server.queue(server.Reply(status=529, json_body=overloaded_body()))
    provider = AnthropicProvider(
        api_key=API_KEY,
        base_url=server.url,
        retry=RetryPolicy(max_retries=5, sleep=cancelling_sleep),
    )
    try:
        events = run(
            provider.open_model_session("a", ModelSessionOptions(instructions="")),
            ask("go"),
            cancel=cancel,
        )
    finally:
        provider.close()
    assert isinstance(events[0], Retrying)
    assert events[-1] == Done(state="cancelled")
    assert len(server.requests) == 1


def test_compaction_returns_the_summary_as_the_replacement_context(server, provider):
    server.queue(text_reply(server, "We talked about Oslo."))
    session = provider.open_model_session(
        "a", ModelSessionOptions(instructions="", tools=(WEATHER,))
    )

    outcome = session.compact(ask("Weather in Oslo?"), Selection(), CancelToken())

    assert isinstance(outcome, CompactionCompleted)
    assert outcome.summary == "We talked about Oslo."
    (message,) = outcome.messages
    assert isinstance(message, UserMessage)
    assert message.content[0].text.endswith("We talked about Oslo.")
    sent = server.requests[0].json()["messages"]
    assert [m["role"] for m in sent] == ["user"]
    assert sent[0]["content"][1]["text"].startswith("Summarise the conversation")
