"""``RespondingModel``: answers from the conversation, deterministically."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import Any

import msgspec
import pytest

from agentkeep.errors import ModelSessionBusyError, ModelSessionClosedError
from agentkeep.messages import system
from agentkeep.providers import CancelToken, RespondingModel
from agentkeep.types import (
    AssistantBlock,
    AssistantMessage,
    CompactionCancelled,
    CompactionCompleted,
    CompactionFailed,
    CompactionMessage,
    Context,
    Done,
    Message,
    ModelSessionOptions,
    ReasoningBlock,
    ReasoningEnd,
    Selection,
    StreamEvent,
    TextBlock,
    TextDelta,
    TextEnd,
    Tokens,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolResultMessage,
    Usage,
    UserMessage,
)

OPTIONS = ModelSessionOptions(instructions="i")
SELECTION = Selection(model="gym-1")


def user(text: str) -> UserMessage:
    return UserMessage(content=(TextBlock(text=text),))


def stream(
    model: RespondingModel, messages: list[Message] | tuple[Message, ...]
) -> list[StreamEvent]:
    session = model.open_model_session("agent", OPTIONS)
    events = list(
        session.stream(
            Context(instructions="i", messages=tuple(messages)), SELECTION, CancelToken()
        )
    )
    session.close()
    return events


def assemble(events: list[StreamEvent]) -> AssistantMessage:
    """The finished blocks of a response, as the loop would keep them."""
    blocks: list[AssistantBlock] = []
    names: dict[str, str] = {}
    for event in events:
        if isinstance(event, TextEnd):
            blocks.append(TextBlock(text=event.text))
        elif isinstance(event, ReasoningEnd):
            blocks.append(ReasoningBlock(text=event.text, reasoning=event.reasoning))
        elif isinstance(event, ToolCallStart):
            names[event.call_id] = event.name
        elif isinstance(event, ToolCallEnd):
            blocks.append(
                ToolCallBlock(
                    call_id=event.call_id, name=names[event.call_id], arguments=event.arguments
                )
            )
    return AssistantMessage(content=tuple(blocks))


def test_a_user_message_is_answered_with_a_durable_tool_call() -> None:
    events = stream(RespondingModel(), [user("hello")])
    assert events == [
        ToolCallStart(call_id="call-0", name="durable_tool"),
        ToolCallDelta(call_id="call-0", delta='{"call":"call-0"}'),
        ToolCallEnd(call_id="call-0", arguments='{"call":"call-0"}'),
        TokenUsage(usage=Usage(input=10, output=5)),
        Done(state="tool_call", tokens=Tokens(input=10, output=5)),
    ]


def test_a_tool_result_is_answered_with_text() -> None:
    history: list[Message] = [
        user("hello"),
        AssistantMessage(
            content=(ToolCallBlock(call_id="call-0", name="durable_tool", arguments="{}"),)
        ),
        ToolResultMessage(call_id="call-0", content=(TextBlock(text="ok"),)),
    ]
    events = stream(RespondingModel(usage_events=False), history)
    assert events == [
        *events[:1],
        TextDelta(delta="answer-1"),
        TextEnd(text="answer-1"),
        Done(state="normal", tokens=Tokens(input=30, output=5)),
    ]


def test_past_notices_reads_past_trailing_system_messages() -> None:
    """A user message behind a hook's notices gets its tool call with ``past_notices``;
    without it the notice is the last word and is answered with text."""
    history: list[Message] = [user("hello"), system("notice a"), system("notice b")]
    calling = stream(RespondingModel(past_notices=True), history)
    assert ToolCallStart(call_id="call-0", name="durable_tool") in calling
    answering = stream(RespondingModel(), history)
    assert TextEnd(text="answer-1") in answering
    assert not any(isinstance(e, ToolCallStart) for e in answering)


def test_an_empty_conversation_gets_answer_zero() -> None:
    assert TextEnd(text="answer-0") in stream(RespondingModel(), [])


def test_a_whole_conversation_alternates_tools_and_counts_answers() -> None:
    model = RespondingModel(reasoning=True, stream_chunks=(1, 4), seed=3)
    history: list[Message] = []
    calls: list[tuple[str, str]] = []
    answers: list[str] = []
    for turn in range(1, 4):
        history.append(user(f"question {turn}"))
        while True:
            events = stream(model, history)
            done = events[-1]
            assert isinstance(done, Done)
            assert done.tokens == Tokens(input=10 * len(history), output=5)
            message = assemble(events)
            history.append(message)
            if done.state == "normal":
                answers += [b.text for b in message.content if isinstance(b, TextBlock)]
                break
            for block in message.content:
                if isinstance(block, ToolCallBlock):
                    calls.append((block.call_id, block.name))
                    assert msgspec.json.decode(block.arguments) == {"call": block.call_id}
                    history.append(
                        ToolResultMessage(call_id=block.call_id, content=(TextBlock(text="ok"),))
                    )
    assert calls == [
        ("call-0", "durable_tool"),
        ("call-1", "fragile_tool"),
        ("call-2", "durable_tool"),
    ]
    assert answers == ["answer-1", "answer-2", "answer-3"]


def test_deltas_add_up_to_the_finished_blocks() -> None:
    events = stream(RespondingModel(stream_chunks=5), [user("x")])
    deltas = "".join(event.delta for event in events if isinstance(event, ToolCallDelta))
    assert len([event for event in events if isinstance(event, ToolCallDelta)]) == 5
    (end,) = [event for event in events if isinstance(event, ToolCallEnd)]
    assert deltas == end.arguments


CHAOS_SCRIPT = r"""
import sys, msgspec
from agentkeep.providers import CancelToken, RespondingModel
from agentkeep.types import Context, Selection, ModelSessionOptions, TextBlock, UserMessage

def produce() -> bytes:
    model = RespondingModel(seed=7, stream_chunks=(1, 6), reasoning=True, failure_rate=0.5)
    out = []
    for n in range(1, 9):
        messages = tuple(UserMessage(content=(TextBlock(text=f"q{i}"),)) for i in range(n))
        session = model.open_model_session("a", ModelSessionOptions(instructions="i"))
        context = Context(instructions="i", messages=messages)
        out.append(list(session.stream(context, Selection(), CancelToken())))
        session.close()
    return msgspec.json.encode(out)

if __name__ == "__main__":
    sys.stdout.buffer.write(produce())
"""


def _run_in_process() -> bytes:
    namespace: dict[str, Any] = {"__name__": "chaos_script"}
    exec(CHAOS_SCRIPT, namespace)
    produced: bytes = namespace["produce"]()
    return produced


@pytest.mark.parametrize("hash_seed", ["0", "12345"])
def test_the_same_conversation_gives_the_same_events_in_another_process(hash_seed: str) -> None:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    child = subprocess.run(
        [sys.executable, "-c", CHAOS_SCRIPT], env=env, capture_output=True, check=True, timeout=60
    )
    here = _run_in_process()
    assert child.stdout == here
    decoded = msgspec.json.decode(here)
    assert any(events[-1]["state"] == "error" for events in decoded)  # failures were drawn
    assert any(events[-1]["state"] == "tool_call" for events in decoded)


def test_seeded_failures_can_hit_every_event_index() -> None:
    plain = stream(RespondingModel(stream_chunks=3), [user("x")])
    seen: set[int] = set()
    for seed in range(60):
        events = stream(RespondingModel(seed=seed, stream_chunks=3, failure_rate=1.0), [user("x")])
        done = events[-1]
        assert isinstance(done, Done)
        assert done.state == "error"
        assert done.provider_error is not None
        assert done.provider_error.type == "server_overloaded"
        assert events[:-1] == plain[: len(events) - 1]  # a failure truncates, never alters
        assert sum(isinstance(event, Done) for event in events) == 1
        seen.add(len(events) - 1)
    assert seen == set(range(len(plain)))


def test_a_retry_of_the_same_conversation_draws_again() -> None:
    model = RespondingModel(seed=1, failure_rate=0.5)
    outcomes = [stream(model, [user("x")])[-1].state for _ in range(12)]  # type: ignore[union-attr]
    assert {"error", "tool_call"} <= set(outcomes)
    again = RespondingModel(seed=1, failure_rate=0.5)
    assert [stream(again, [user("x")])[-1].state for _ in range(12)] == outcomes  # type: ignore[union-attr]


def test_latency_never_delays_a_cancel() -> None:
    model = RespondingModel(latency_seconds=60.0)
    session = model.open_model_session("agent", OPTIONS)
    cancel = CancelToken()
    received: list[StreamEvent] = []
    started = threading.Event()

    def consume() -> None:
        iterator = session.stream(
            Context(instructions="i", messages=(user("x"),)), SELECTION, cancel
        )
        started.set()
        received.extend(iterator)

    consumer = threading.Thread(target=consume)
    consumer.start()
    assert started.wait(10)
    cancel.cancel()
    consumer.join(timeout=10)
    assert not consumer.is_alive()
    assert received == [Done(state="cancelled")]
    session.close()


def test_cancelling_mid_stream_stops_within_one_event() -> None:
    session = RespondingModel(stream_chunks=4).open_model_session("agent", OPTIONS)
    cancel = CancelToken()
    iterator = session.stream(Context(instructions="i", messages=(user("x"),)), SELECTION, cancel)
    assert isinstance(next(iterator), ToolCallStart)
    assert isinstance(next(iterator), ToolCallDelta)
    cancel.cancel()
    assert list(iterator) == [Done(state="cancelled")]
    session.close()


def test_compaction_summarises_and_keeps_the_numbering() -> None:
    model = RespondingModel()
    history: list[Message] = [
        user("one"),
        AssistantMessage(
            content=(ToolCallBlock(call_id="call-0", name="durable_tool", arguments="{}"),)
        ),
        ToolResultMessage(call_id="call-0", content=(TextBlock(text="ok"),)),
        AssistantMessage(content=(TextBlock(text="answer-1"),)),
        user("two"),
    ]
    session = model.open_model_session("agent", OPTIONS)
    outcome = session.compact(
        Context(instructions="i", messages=tuple(history)), SELECTION, CancelToken()
    )
    session.close()
    assert isinstance(outcome, CompactionCompleted)
    summary, kept = outcome.messages
    assert isinstance(summary, CompactionMessage)
    assert summary.content == "Summary of 4 messages (1 user messages, 1 tool calls)."
    assert kept == history[-1]  # queued input survives verbatim
    assert outcome.usage == Usage(input=50, output=5)
    events = stream(model, outcome.messages)
    assert events[0] == ToolCallStart(call_id="call-1", name="fragile_tool")  # not call-0 again


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("fail", CompactionFailed),
        ("cancel", CompactionCancelled),
        (CompactionCompleted(messages=()), CompactionCompleted),
        (lambda context: CompactionFailed(kind="invalid_summary", message="x"), CompactionFailed),
    ],
)
def test_compaction_can_be_configured(mode: object, expected: type) -> None:
    session = RespondingModel(compaction=mode).open_model_session("agent", OPTIONS)  # type: ignore[arg-type]
    outcome = session.compact(
        Context(instructions="i", messages=(user("x"),)), SELECTION, CancelToken()
    )
    assert isinstance(outcome, expected)


def test_a_hanging_compaction_ends_on_cancel() -> None:
    session = RespondingModel(compaction="hang").open_model_session("agent", OPTIONS)
    cancel = CancelToken()
    outcome: list[object] = []
    worker = threading.Thread(
        target=lambda: outcome.append(
            session.compact(Context(instructions="i", messages=()), SELECTION, cancel)
        )
    )
    worker.start()
    cancel.cancel()
    worker.join(timeout=10)
    assert outcome == [CompactionCancelled()]


def test_sessions_keep_the_one_operation_rule() -> None:
    session = RespondingModel().open_model_session("agent", OPTIONS)
    iterator = session.stream(Context(instructions="i", messages=()), SELECTION, CancelToken())
    with pytest.raises(ModelSessionBusyError):
        session.stream(Context(instructions="i", messages=()), SELECTION, CancelToken())
    assert list(iterator)[-1].state == "normal"  # type: ignore[union-attr]
    session.close()
    with pytest.raises(ModelSessionClosedError):
        session.compact(Context(instructions="i", messages=()), SELECTION, CancelToken())


def test_a_bad_failure_rate_is_refused() -> None:
    with pytest.raises(ValueError, match="failure_rate"):
        RespondingModel(failure_rate=1.5)


def test_asking_the_same_conversation_again_streams_the_same_events() -> None:
    model = RespondingModel(seed=9, stream_chunks=(1, 8), reasoning=True)
    history = [user("a"), user("b")]
    first = stream(model, history)
    assert stream(model, history) == first
    assert stream(RespondingModel(seed=9, stream_chunks=(1, 8), reasoning=True), history) == first
