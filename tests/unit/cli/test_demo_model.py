"""The demo model and the CLI's tools: deterministic calls, safe arithmetic, honest answers."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from agentkeep.cli.tools import Ledger, ToolEnvironment, build_tools, evaluate
from agentkeep.messages import user
from agentkeep.providers.demo import HELP_ANSWER, DemoModel, plan_calls, summarise_results
from agentkeep.tools import BasicToolContext, run_tool, validate_arguments
from agentkeep.types import (
    AssistantMessage,
    Context,
    Done,
    Message,
    TextBlock,
    TextEnd,
    ToolCallBlock,
    ToolCallEnd,
    ToolCallStart,
    ToolResultMessage,
)


def test_calls_follow_the_order_of_the_request() -> None:
    text = (
        'Save a note "pay 5 + 5 dollars", then work out 12 * (3 + 4) and count the words in "a b"'
    )
    assert plan_calls(text) == [
        ("save_note", {"text": "pay 5 + 5 dollars"}),  # numbers inside quotes are not maths
        ("calculator", {"expression": "12 * (3 + 4)"}),
        ("word_count", {"text": "a b"}),
    ]


def test_plain_chat_calls_nothing() -> None:
    assert plan_calls("hello there, 42 is a number") == []


@pytest.mark.parametrize(
    ("expression", "value"),
    [("12 * (3 + 4)", 84), ("2 ** 10", 1024), ("7 / 2", 3.5), ("-3 + 1", -2), ("9 // 2", 4)],
)
def test_the_calculator_evaluates_arithmetic(expression: str, value: float) -> None:
    assert evaluate(expression) == value


@pytest.mark.parametrize("expression", ["__import__('os')", "1 / 0", "2 ** 100000", "True + 1"])
def test_the_calculator_refuses_anything_but_arithmetic(expression: str) -> None:
    with pytest.raises(ValueError, match=r"."):
        evaluate(expression)


def _response(messages: tuple[Message, ...]) -> list[object]:
    return list(DemoModel().response(Context(instructions="", messages=messages), random.Random(0)))


def test_the_same_conversation_gets_the_same_calls_with_ids_that_continue() -> None:
    earlier = AssistantMessage(
        content=(ToolCallBlock(call_id="call-0", name="calculator", arguments="{}"),)
    )
    messages = (
        user("1+1"),
        earlier,
        ToolResultMessage(call_id="call-0", content=(TextBlock(text="2"),)),
        user('What is 6 * 7? And note "x"'),
    )
    first, second = _response(messages), _response(messages)
    assert first == second
    starts = [e for e in first if isinstance(e, ToolCallStart)]
    assert [(s.call_id, s.name) for s in starts] == [
        ("call-1", "calculator"),
        ("call-2", "save_note"),
    ]
    assert isinstance(first[-1], Done)
    assert first[-1].state == "tool_call"
    arguments = [e.arguments for e in first if isinstance(e, ToolCallEnd)]
    assert arguments == ['{"expression":"6 * 7"}', '{"text":"x"}']


def test_a_message_without_a_request_gets_the_help_answer() -> None:
    events = _response((user("hi"),))
    (end,) = [e for e in events if isinstance(e, TextEnd)]
    assert end.text == HELP_ANSWER


def test_the_answer_reports_an_interrupted_note_instead_of_claiming_it() -> None:
    calls = (
        ToolCallBlock(call_id="call-0", name="save_note", arguments='{"text":"milk"}'),
        ToolCallBlock(call_id="call-1", name="calculator", arguments='{"expression":"2 * 3"}'),
    )
    messages: tuple[Message, ...] = (
        user('note "milk" and 2 * 3'),
        AssistantMessage(content=calls),
        ToolResultMessage(
            call_id="call-0", content=(TextBlock(text="interrupted."),), is_error=True
        ),
        ToolResultMessage(call_id="call-1", content=(TextBlock(text="6"),)),
    )
    answer = summarise_results(messages)
    assert answer.startswith('I did not retry the note "milk": interrupted.')
    assert answer.endswith("2 * 3 = 6.")


def test_the_note_tool_appends_once_per_run_and_records_every_run(tmp_path: Path) -> None:
    tools = {t.name: t for t in build_tools(ToolEnvironment(home=tmp_path))}
    note, count = tools["save_note"], tools["word_count"]
    assert not note.durable
    assert count.durable
    assert tools["calculator"].durable
    call = ToolCallBlock(call_id="c1", name="save_note", arguments='{"text":"milk"}')
    args = validate_arguments(note, call)
    ctx = BasicToolContext(agent_id="a1", call_id="i1", provider_call_id="c1")
    output = run_tool(note, ctx, args)
    assert (tmp_path / "notes.txt").read_text() == "milk\n"
    assert output.content == (TextBlock(text="saved to notes.txt"),)  # type: ignore[union-attr]
    (recorded,) = Ledger(tmp_path / "tool-runs.jsonl").runs()
    assert (recorded.tool, recorded.agent_id, recorded.provider_call_id) == (
        "save_note",
        "a1",
        "c1",
    )
