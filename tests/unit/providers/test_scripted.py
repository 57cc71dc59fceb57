"""``ScriptedModel`` and the ``script`` short-hands."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import get_args

import pytest

from agentkeep.errors import AgentkeepError, ModelSessionBusyError, ModelSessionClosedError
from agentkeep.providers import CancelToken, ScriptedModel, script
from agentkeep.types import (
    AssistantMessage,
    BlockReset,
    BlockStart,
    BlockStop,
    CompactionCancelled,
    CompactionCompleted,
    CompactionFailed,
    CompactionMessage,
    Context,
    Done,
    ModelSessionOptions,
    ProviderErrorInfo,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    Retrying,
    Selection,
    StreamEvent,
    TextBlock,
    TextDelta,
    TextEnd,
    TextStart,
    Tokens,
    TokenUsage,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolDescriptor,
    ToolResultDelta,
    ToolResultEnd,
    ToolResultStart,
    Usage,
    UserMessage,
)

OPTIONS = ModelSessionOptions(instructions="Be useful.", tools=(ToolDescriptor(name="add"),))
SELECTION = Selection(model="gym-1", effort="low")


def context(*texts: str) -> Context:
    return Context(
        instructions="Be useful.",
        messages=tuple(UserMessage(content=(TextBlock(text=text),)) for text in texts),
    )


def run(model: ScriptedModel, *, cancel: CancelToken | None = None) -> list[StreamEvent]:
    session = model.open_model_session("agent", OPTIONS)
    events = list(session.stream(context("hi"), SELECTION, cancel or CancelToken()))
    session.close()
    return events


def test_a_text_response_is_replayed_and_the_request_recorded() -> None:
    model = ScriptedModel([script.text("hello", tokens=script.tokens(30, 7))])
    session = model.open_model_session("agent-1", OPTIONS)
    shown = context("What is 2+2?")
    events = list(session.stream(shown, SELECTION, CancelToken()))
    session.close()
    assert events == [
        TextStart(),
        TextDelta(delta="hello"),
        TextEnd(text="hello"),
        Done(state="normal", tokens=Tokens(input=30, output=7)),
    ]
    assert [(s.agent_id, s.options) for s in model.model_sessions] == [("agent-1", OPTIONS)]
    (request,) = model.requests
    assert (request.number, request.agent_id) == (1, "agent-1")
    assert request.context == shown
    assert request.selection == SELECTION
    assert model.closed_model_sessions == ("agent-1",)
    assert model.remaining == 0


def test_every_stream_event_type_replays_unchanged() -> None:
    every: list[StreamEvent] = [
        BlockStart(),
        TextStart(),
        TextDelta(delta="a"),
        TextEnd(text="a", vendor='{"phase":"final_answer"}'),
        ReasoningStart(),
        ReasoningDelta(delta="r"),
        ReasoningEnd(text="r", reasoning="c2lnbmVk", vendor="anthropic"),
        ToolCallStart(call_id="c1", name="add", namespace="math", vendor="fc_1"),
        ToolCallDelta(call_id="c1", delta="{}"),
        ToolCallEnd(call_id="c1", arguments="{}"),
        ToolResultStart(call_id="s1", vendor="raw"),
        ToolResultDelta(call_id="s1", delta="x"),
        ToolResultEnd(call_id="s1", content=(TextBlock(text="x"),), vendor="raw-final"),
        BlockReset(),
        Retrying(attempt=1, reason="overloaded", delay_seconds=0.2),
        BlockStop(),
        TokenUsage(usage=Usage(input=1, output=2, cache_read=3, cache_write=4)),
        Done(state="tool_call", tokens=Tokens(input=1, output=2)),
    ]
    assert {type(event) for event in every} == set(get_args(StreamEvent))
    assert run(ScriptedModel([every])) == every


def test_tool_calls_get_unique_ids_when_none_is_given() -> None:
    model = ScriptedModel(
        [
            script.tool_call("add", {"a": 1}),
            script.tool_calls(
                script.call("add", {"a": 2}),
                script.call("sub", '{"b": 3}', call_id="mine", namespace="math"),
                text="Working on it.",
            ),
        ]
    )
    session = model.open_model_session("agent", OPTIONS)
    first = list(session.stream(context("x"), SELECTION, CancelToken()))
    second = list(session.stream(context("x"), SELECTION, CancelToken()))
    assert first == [
        ToolCallStart(call_id="call-1-1", name="add"),
        ToolCallDelta(call_id="call-1-1", delta='{"a":1}'),
        ToolCallEnd(call_id="call-1-1", arguments='{"a":1}'),
        Done(state="tool_call", tokens=script.DEFAULT_TOKENS),
    ]
    ends = [event for event in second if isinstance(event, ToolCallEnd)]
    assert [end.call_id for end in ends] == ["call-2-1", "mine"]
    assert isinstance(second[0], TextStart)
    assert ToolCallStart(call_id="mine", name="sub", namespace="math") in second


def test_chunked_arguments_concatenate_to_the_final_arguments() -> None:
    response = script.tool_calls(script.call("add", {"a": 1, "b": 22}, chunks=4))
    events = run(ScriptedModel([response]))
    deltas = [event.delta for event in events if isinstance(event, ToolCallDelta)]
    (end,) = [event for event in events if isinstance(event, ToolCallEnd)]
    assert len(deltas) == 4
    assert "".join(deltas) == end.arguments == '{"a":1,"b":22}'


def test_reasoning_keeps_its_signature_then_answers() -> None:
    events = run(ScriptedModel([script.reasoning("hmm", signature="sig==", answer="42")]))
    assert events[:3] == [
        ReasoningStart(),
        ReasoningDelta(delta="hmm"),
        ReasoningEnd(text="hmm", reasoning="sig==", vendor=None),
    ]
    assert TextEnd(text="42") in events
    assert events[-1].state == "normal"  # type: ignore[union-attr]


def test_a_server_tool_call_carries_its_result() -> None:
    response = script.server_tool_call(
        "web_search", {"query": "x"}, result="found", vendor="raw", answer="done"
    )
    events = run(ScriptedModel([response]))
    assert events[0] == ToolCallStart(call_id="server-web_search", name="web_search", server=True)
    assert (
        ToolResultEnd(call_id="server-web_search", content=(TextBlock(text="found"),), vendor="raw")
        in events
    )
    assert events[-1] == Done(state="normal", tokens=script.DEFAULT_TOKENS)


@pytest.mark.parametrize(
    ("name", "kind", "provider_error"),
    [
        ("internal_error", "internal_error", None),
        ("context_overflow", "context_overflow", None),
        ("overloaded", "internal_error", "server_overloaded"),
        ("rate_limit", "internal_error", "rate_limit"),
        ("out_of_tokens", "billing_error", "out_of_tokens"),
    ],
)
def test_error_short_hand(name: str, kind: str, provider_error: str | None) -> None:
    (event,) = run(ScriptedModel([script.error(name, "boom")]))
    assert isinstance(event, Done)
    assert (event.state, event.kind, event.message) == ("error", kind, "boom")
    got = event.provider_error.type if event.provider_error else None
    assert got == provider_error


def test_error_keeps_reset_time_and_partial_output() -> None:
    response = script.error("rate_limit", reset_at_ms=123, before=[TextStart()])
    events = run(ScriptedModel([response]))
    assert events[0] == TextStart()
    assert isinstance(events[1], Done)
    assert events[1].provider_error == ProviderErrorInfo(type="rate_limit", reset_at_ms=123)


def test_an_unknown_error_name_is_refused() -> None:
    with pytest.raises(ValueError, match="Unknown error"):
        script.error("nonsense")


def test_retry_then_rewinds_each_failed_attempt() -> None:
    events = run(ScriptedModel([script.retry_then(script.text("ok"), attempts=2)]))
    names = [type(event).__name__ for event in events]
    attempt = ["BlockStart", "TextStart", "TextDelta", "TextEnd", "BlockReset", "Retrying"]
    final = ["BlockStart", "TextStart", "TextDelta", "TextEnd", "BlockStop", "Done"]
    assert names == attempt * 2 + final
    assert [e.attempt for e in events if isinstance(e, Retrying)] == [1, 2]


def test_incomplete_blocks_and_calls() -> None:
    model = ScriptedModel([script.incomplete_block("par"), script.incomplete_tool_call("add")])
    session = model.open_model_session("agent", OPTIONS)
    text = list(session.stream(context("x"), SELECTION, CancelToken()))
    call = list(session.stream(context("x"), SELECTION, CancelToken()))
    assert text == [TextStart(), TextDelta(delta="par"), script.done("length")]
    assert ToolCallEnd(call_id="call-2-1", arguments='{"a": ', incomplete=True) in call
    assert call[-1] == script.done("length")


def test_a_token_usage_event_and_a_custom_done() -> None:
    response = script.events(script.usage(10, 2, cache_read=8), script.done("length"))
    assert run(ScriptedModel([response])) == [
        TokenUsage(usage=Usage(input=10, output=2, cache_read=8)),
        Done(state="length", tokens=script.DEFAULT_TOKENS),
    ]


def test_running_out_of_script_is_a_clear_error() -> None:
    model = ScriptedModel([script.text("one")])
    run(model)
    (event,) = run(model)
    assert isinstance(event, Done)
    assert event.state == "error"
    assert event.message == "ScriptedModel has no response left for request #2."


def test_a_response_may_be_computed_from_the_context() -> None:
    def echo(shown: Context) -> script.ScriptedResponse:
        return script.text(f"{len(shown.messages)} messages")

    assert TextEnd(text="1 messages") in run(ScriptedModel([echo]))


def test_events_after_the_first_done_are_never_yielded() -> None:
    events = run(ScriptedModel([[script.done("normal"), TextStart(), script.done("length")]]))
    assert events == [script.done("normal")]


def test_broken_providers_can_be_scripted() -> None:
    model = ScriptedModel([script.without_done(TextStart()), script.raises(RuntimeError("socket"))])
    session = model.open_model_session("agent", OPTIONS)
    assert list(session.stream(context("x"), SELECTION, CancelToken())) == [TextStart()]
    with pytest.raises(RuntimeError, match="socket"):
        list(session.stream(context("x"), SELECTION, CancelToken()))
    session.close()  # neither left the session busy


def test_cancelling_mid_stream_stops_within_one_event() -> None:
    model = ScriptedModel([script.text("abcdef", chunks=6)])
    session = model.open_model_session("agent", OPTIONS)
    cancel = CancelToken()
    stream = session.stream(context("x"), SELECTION, cancel)
    assert next(stream) == TextStart()
    assert next(stream) == TextDelta(delta="a")
    cancel.cancel()
    assert next(stream) == Done(state="cancelled")
    assert list(stream) == []
    session.close()


def test_a_cancelled_token_yields_only_the_cancelled_done() -> None:
    cancel = CancelToken()
    cancel.cancel()
    assert run(ScriptedModel([script.text("x")]), cancel=cancel) == [Done(state="cancelled")]


def test_a_hang_ends_when_another_thread_cancels() -> None:
    model = ScriptedModel([script.hang(before=[TextStart()])])
    session = model.open_model_session("agent", OPTIONS)
    cancel = CancelToken()
    received: list[StreamEvent] = []
    consumer = threading.Thread(
        target=lambda: received.extend(session.stream(context("x"), SELECTION, cancel))
    )
    consumer.start()
    assert model.wait_for_requests(1, timeout_seconds=10)
    cancel.cancel("abort")
    consumer.join(timeout=10)
    assert not consumer.is_alive()
    assert received[-1] == Done(state="cancelled")
    assert sum(isinstance(event, Done) for event in received) == 1
    session.close()


def test_one_operation_at_a_time() -> None:
    model = ScriptedModel([script.text("a", chunks=1), script.text("b")], compactions=[])
    session = model.open_model_session("agent", OPTIONS)
    first: Iterator[StreamEvent] = session.stream(context("x"), SELECTION, CancelToken())
    next(first)
    with pytest.raises(ModelSessionBusyError):
        session.stream(context("x"), SELECTION, CancelToken())
    with pytest.raises(ModelSessionBusyError):
        session.compact(context("x"), SELECTION, CancelToken())
    with pytest.raises(ModelSessionBusyError):
        session.close()
    first.close()  # type: ignore[attr-defined]  # the consumer's return(): frees the session
    assert TextEnd(text="b") in list(session.stream(context("x"), SELECTION, CancelToken()))
    assert len(model.requests) == 2  # the refused calls were never requests


def test_a_closed_session_refuses_everything() -> None:
    model = ScriptedModel([script.text("a")])
    session = model.open_model_session("agent", OPTIONS)
    session.close()
    with pytest.raises(ModelSessionClosedError):
        session.stream(context("x"), SELECTION, CancelToken())
    with pytest.raises(ModelSessionClosedError):
        session.compact(context("x"), SELECTION, CancelToken())
    with pytest.raises(ModelSessionClosedError, match="closed twice"):
        session.close()
    assert model.closed_model_sessions == ("agent",)
    assert model.requests == ()


def test_compactions_are_replayed_and_recorded() -> None:
    summary = CompactionMessage(content="summary")
    model = ScriptedModel(
        compactions=[
            script.compacted(summary, summary="summary"),
            script.compaction_failed("too long"),
            lambda shown: script.compacted(*shown.messages[-1:]),
            script.HANG,
        ]
    )
    session = model.open_model_session("agent", OPTIONS)
    shown = context("a", "b")
    first = session.compact(shown, SELECTION, CancelToken())
    assert first == CompactionCompleted(messages=(summary,), summary="summary")
    assert session.compact(shown, SELECTION, CancelToken()) == CompactionFailed(
        kind="inference_error", message="too long"
    )
    third = session.compact(shown, SELECTION, CancelToken())
    assert isinstance(third, CompactionCompleted)
    assert third.messages == shown.messages[-1:]
    cancel = CancelToken()
    cancel.cancel()
    assert session.compact(shown, SELECTION, cancel) == CompactionCancelled()
    fifth = session.compact(shown, SELECTION, CancelToken())
    assert isinstance(fifth, CompactionFailed)
    assert "no compaction left" in fifth.message
    assert [request.number for request in model.compactions] == [1, 2, 3, 4, 5]
    assert model.compactions[0].context == shown


def test_sessions_on_many_threads_share_one_script() -> None:
    model = ScriptedModel([script.text(f"answer-{i}") for i in range(16)])
    answers: list[str] = []
    lock = threading.Lock()

    def agent(index: int) -> None:
        session = model.open_model_session(f"agent-{index}", OPTIONS)
        for event in session.stream(context("x"), SELECTION, CancelToken()):
            if isinstance(event, TextEnd):
                with lock:
                    answers.append(event.text)
        session.close()

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(answers) == sorted(f"answer-{i}" for i in range(16))
    assert sorted(request.number for request in model.requests) == list(range(1, 17))
    assert len(model.closed_model_sessions) == 16


def test_more_responses_can_be_added_later() -> None:
    model = ScriptedModel()
    model.add(script.text("late"))
    assert model.remaining == 1
    assert TextEnd(text="late") in run(model)


def test_the_assistant_message_of_a_context_is_shown_verbatim() -> None:
    model = ScriptedModel([script.text("a")])
    session = model.open_model_session("agent", OPTIONS)
    signed = AssistantMessage(content=(TextBlock(text="x", vendor='{"id":"msg_1"}'),))
    shown = Context(instructions="i", messages=(*context("q").messages, signed))
    list(session.stream(shown, SELECTION, CancelToken()))
    assert model.requests[0].context.messages[-1] == signed


def test_a_script_without_done_still_ends_with_exactly_one() -> None:
    events = run(ScriptedModel([[TextStart(), TextDelta(delta="a")]]))
    assert events[:2] == [TextStart(), TextDelta(delta="a")]
    assert events[2] == Done(
        state="error", kind="internal_error", message="The stream ended without a done event."
    )
    assert len(events) == 3


def test_a_model_that_does_not_record_counts_requests_and_keeps_no_context() -> None:
    """``record=False`` (benchmarks, soak runs): each request is answered in order and
    counted for ``wait_for_requests``, but no request — so no context — is kept."""
    model = ScriptedModel([script.text("one"), script.text("two")], record=False)
    first = run(model)
    second = run(model)
    assert [e.text for e in first if isinstance(e, TextEnd)] == ["one"]
    assert [e.text for e in second if isinstance(e, TextEnd)] == ["two"]
    assert model.wait_for_requests(2, timeout_seconds=0)
    assert not model.wait_for_requests(3, timeout_seconds=0)
    assert model.remaining == 0
    assert model._requests == []  # nothing kept (the point of the option)
    with pytest.raises(AgentkeepError, match="record=False"):
        _ = model.requests
