"""Lifecycle ids and "Continue from where you left off." (docs/lifecycle.md).

A response cut after its first finished block is never the final answer: the resume retires
the cut request's inference id, appends the durable continue notice and asks again, so no
request ever ends with the model's own message. The hooks are told the same loop and turn
ids before and after a restart (docs/lifecycle.md).
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.providers.scripted import StreamRequest
from agentkeep.types import (
    AssistantMessage,
    Message,
    StreamEvent,
    SystemMessage,
    TextDelta,
    TextEnd,
    TextStart,
)
from agentkeep.types.ids import is_valid_id

from .conftest import World, printed, python_child, roles, text_of

CONTINUE = "Continue from where you left off."

# One finished block, then a second that starts, streams "par" and never ends.
CUT = [
    TextStart(),
    TextDelta(delta="part one"),
    TextEnd(text="part one"),
    TextStart(),
    TextDelta(delta="par"),
]

HOOKS = (
    "before_agent_loop",
    "before_turn",
    "before_inference",
    "after_inference",
    "after_turn",
    "after_agent_loop",
    "after_agent_settled",
)


class Recorder(ak.Feature):
    """Records each lifecycle hook with the ids its context carries; ``cut`` is set once
    the second block streams (the first block is durable by then: it was committed when
    the second one started, before this event reached any observer)."""

    name = "recorder"

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None, str | None, str | None, str | None]] = []
        self.cut = threading.Event()

    def _note(self, hook: str, ctx: ak.HookContext) -> None:
        self.seen.append((hook, ctx.loop_id, ctx.turn_id, ctx.inference_id, ctx.settlement_id))

    def on_event(self, ctx: ak.HookContext, event: StreamEvent) -> None:
        if isinstance(event, TextDelta) and event.delta == "par":
            self.cut.set()

    def before_agent_loop(self, ctx: ak.HookContext) -> None:
        self._note("before_agent_loop", ctx)

    def before_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> None:
        self._note("before_turn", ctx)

    def before_inference(self, ctx: ak.HookContext) -> None:
        self._note("before_inference", ctx)

    def after_inference(self, ctx: ak.HookContext, inference: Any) -> None:
        self._note("after_inference", ctx)

    def after_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> None:
        self._note("after_turn", ctx)

    def after_agent_loop(self, ctx: ak.HookContext) -> None:
        self._note("after_agent_loop", ctx)

    def after_agent_settled(self, ctx: ak.HookContext, error: str | None) -> None:
        self._note("after_agent_settled", ctx)

    def ids(self, hook: str) -> list[tuple[str | None, str | None, str | None, str | None]]:
        return [
            (loop, turn, inf, settle) for name, loop, turn, inf, settle in self.seen if name == hook
        ]


def texts(messages: tuple[Message, ...] | list[Message]) -> list[str]:
    return [text_of(m) for m in messages]


def assert_never_ends_with_own_message(requests: tuple[StreamRequest, ...]) -> None:
    for request in requests:
        last = request.context.messages[-1]
        assert not isinstance(last, AssistantMessage), f"request {request.number} ends {last}"


def test_a_response_cut_after_its_first_block_is_continued_after_a_restart(world: World) -> None:
    world.model.add(script.hang(before=CUT))
    before = Recorder()
    system = world.open(features=[before])
    agent = system.create(id="a1")
    agent.send(ak.user("question"))
    assert before.cut.wait(10)
    owed = system.internals.store.read(lambda tx: tx.facts.read_owed("a1"))
    # The cut request's completed content is marked open, with the ids the hooks were told.
    assert owed is not None
    assert owed.response_open
    ((loop_id, turn_id, _, _),) = before.ids("before_turn")
    ((_, _, cut_id, _),) = before.ids("before_inference")
    assert (owed.loop_id, owed.turn_id, owed.inference_id) == (loop_id, turn_id, cut_id)
    system.close(timeout_seconds=0.5)  # a restart: the stream is left behind unfinished

    world.model.add(script.text("part two"))
    after = Recorder()
    system = world.open(features=[after])  # resumes the agent that owes work
    assert system.wait_for_idle("a1", timeout_seconds=10)

    # The resume made a request, whose input ends with the notice, not the model's message.
    requests = world.model.requests
    assert len(requests) == 2
    resumed = requests[1].context.messages
    assert roles(list(resumed)) == ["user", "assistant", "system"]
    assert texts(resumed) == ["question", "part one", CONTINUE]
    assert isinstance(resumed[-1], SystemMessage)
    assert_never_ends_with_own_message(requests)
    # The continuation is the final answer; the notice stays in the history.
    transcript = system.transcript("a1")
    assert texts(transcript) == ["question", "part one", CONTINUE, "part two"]
    assert system.internals.store.read(lambda tx: tx.facts.read_owed("a1")) is None
    # Same loop and turn after the reopen; the cut request's id was retired.
    assert after.ids("before_agent_loop") == [(loop_id, turn_id, None, None)]
    assert after.ids("before_turn") == [(loop_id, turn_id, None, None)]
    ((_, _, resumed_id, _),) = after.ids("before_inference")
    assert resumed_id is not None
    assert resumed_id != cut_id
    assert after.ids("after_inference") == [(loop_id, turn_id, resumed_id, None)]
    ((settled_loop, _, _, settlement_id),) = after.ids("after_agent_settled")
    assert settled_loop == loop_id
    assert settlement_id is not None


def test_every_hook_of_a_run_is_told_its_ids_and_a_new_run_gets_new_ones(world: World) -> None:
    world.model.add(script.text("a1"), script.text("a2"))
    recorder = Recorder()
    system = world.open(features=[recorder])
    agent = system.create()
    agent.send(ak.user("q1"))
    assert agent.wait_for_idle(timeout_seconds=10)
    first = {hook: recorder.ids(hook) for hook in HOOKS}
    recorder.seen.clear()
    agent.send(ak.user("q2"))
    assert agent.wait_for_idle(timeout_seconds=10)
    second = {hook: recorder.ids(hook) for hook in HOOKS}

    for run in (first, second):
        assert all(len(run[hook]) == 1 for hook in HOOKS), run
        ((loop_id, turn_id, _, _),) = run["before_agent_loop"]
        assert is_valid_id(loop_id or "")
        assert is_valid_id(turn_id or "")
        for hook in ("before_turn", "after_turn", "after_agent_loop"):
            assert run[hook] == [(loop_id, turn_id, None, None)]
        ((_, _, inference_id, _),) = run["before_inference"]
        assert is_valid_id(inference_id or "")
        assert run["after_inference"] == [(loop_id, turn_id, inference_id, None)]
        ((settled_loop, _, _, settlement_id),) = run["after_agent_settled"]
        assert settled_loop == loop_id
        assert is_valid_id(settlement_id or "")
    ids_of = [
        {value for values in run.values() for value in values[0] if value is not None}
        for run in (first, second)
    ]
    assert not ids_of[0] & ids_of[1], "a new settled-to-settled loop shares no id"


class TransactionalRecorder(Recorder):
    """Also records the transactional hooks inside a run's commits."""

    name = "transactional-recorder"

    def message_accepted_transact(self, ctx: ak.HookContext, accepted: Any) -> None:
        self._note("message_accepted_transact", ctx)

    def before_tool_call_transact(self, ctx: ak.HookContext, call: Any) -> None:
        self._note("before_tool_call_transact", ctx)

    def after_tool_call_transact(self, ctx: ak.HookContext, call: Any, result: Any) -> None:
        self._note("after_tool_call_transact", ctx)


def test_transactional_hooks_inside_a_run_are_told_its_loop_and_turn(world: World) -> None:
    world.model.add(script.tool_call("echo", {"text": "x"}), script.text("done"))
    recorder = TransactionalRecorder()
    system = world.open(features=[recorder])
    agent = system.create()
    agent.send(ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=10)

    ((loop_id, turn_id, _, _),) = recorder.ids("before_turn")
    for hook in (
        "message_accepted_transact",
        "before_tool_call_transact",
        "after_tool_call_transact",
    ):
        assert recorder.ids(hook) == [(loop_id, turn_id, None, None)], hook
    # The two requests of the turn have two ids.
    first, second = (ids[2] for ids in recorder.ids("before_inference"))
    assert first != second


def test_a_retry_forever_retry_after_committed_blocks_continues_after_the_notice(
    world: World,
) -> None:
    world.model.add(script.error("overloaded", before=CUT), script.text("part two"))
    recorder = Recorder()
    system = world.open(
        features=[recorder],
        retry_forever=True,
        retry_initial_seconds=0.01,
        retry_max_seconds=0.02,
    )
    agent = system.create()
    agent.send(ak.user("question"))
    assert agent.wait_for_idle(timeout_seconds=10)

    requests = world.model.requests
    assert len(requests) == 2
    assert texts(requests[1].context.messages) == ["question", "part one", CONTINUE]
    assert_never_ends_with_own_message(requests)
    assert texts(agent.transcript()) == ["question", "part one", CONTINUE, "part two"]
    first, second = (ids[2] for ids in recorder.ids("before_inference"))
    assert first != second, "two provider requests never share an inference id"


class InjectOnce(ak.Feature):
    """Reopens the finished loop once with a notice (an ``inject`` action)."""

    name = "inject-once"

    def __init__(self) -> None:
        self.done = False

    def after_agent_loop(self, ctx: ak.HookContext) -> list[ak.InjectAction]:
        if self.done:
            return []
        self.done = True
        return [ak.InjectAction(message=ak.system("a module notice"))]


def test_a_notice_that_reopens_a_finished_response_follows_the_continue_notice(
    world: World,
) -> None:
    world.model.add(script.text("answer"), script.text("more"))
    system = world.open(features=[InjectOnce()])
    agent = system.create()
    agent.send(ak.user("question"))
    assert agent.wait_for_idle(timeout_seconds=10)

    requests = world.model.requests
    assert len(requests) == 2
    # The continue notice comes first, ahead of the boundary's module notice.
    assert texts(requests[1].context.messages) == [
        "question",
        "answer",
        CONTINUE,
        "a module notice",
    ]
    assert_never_ends_with_own_message(requests)


def test_a_finished_answer_is_not_continued_after_a_restart(world: World) -> None:
    """The notice is for a cut response only: a restart after an answer asks nothing."""
    world.model.add(script.text("the answer"))
    system = world.open()
    agent = system.create(id="a1")
    agent.send(ak.user("question"))
    assert agent.wait_for_idle(timeout_seconds=10)
    system.close()

    system = world.open()
    system.start("a1")
    assert system.wait_for_idle("a1", timeout_seconds=10)
    assert len(world.model.requests) == 1
    assert texts(system.transcript("a1")) == ["question", "the answer"]


# -- a real SIGKILL -----------------------------------------------------------------------

# The child: one agent whose response finishes "part one", starts a second block and never
# ends it. It prints the ids its hooks were told, then "cut" once the first block is durable,
# and waits to be killed.
_CHILD = """
import json, sys, threading
import agentkeep as ak
from agentkeep.types import TextDelta, TextEnd, TextStart
from agentkeep.providers import script

class Tell(ak.Feature):
    name = "tell"
    def _say(self, hook, ctx):
        ids = [ctx.loop_id, ctx.turn_id, ctx.inference_id]
        print(json.dumps([hook, *ids]), flush=True)
    def before_turn(self, ctx, turn):
        self._say("before_turn", ctx)
    def before_inference(self, ctx):
        self._say("before_inference", ctx)
    def on_event(self, ctx, event):
        if isinstance(event, TextDelta) and event.delta == "par":
            print(json.dumps(["cut"]), flush=True)

model = ak.ScriptedModel()
cut = [TextStart(), TextDelta(delta="part one"), TextEnd(text="part one"), TextStart(),
       TextDelta(delta="par")]
model.add(script.hang(before=cut))
providers = ak.Providers()
providers.add("local", model, kind="gym")
system = ak.AgentSystem.open(sys.argv[1], providers=providers, provider="local",
                             model="gym-1", features=[Tell()])
system.create(id="a1").send(ak.user("question"))
threading.Event().wait()
"""


def test_a_sigkill_after_the_first_block_is_continued_with_the_same_loop_and_turn(
    tmp_path: Path,
) -> None:
    home = tmp_path / "state"
    told: dict[str, list[str | None]] = {}
    with python_child(_CHILD, home) as child:
        for hook, *ids in printed(child):
            if hook == "cut":
                break
            told[hook] = ids
        else:
            raise AssertionError("the child exited before its response was cut")
        os.kill(child.pid, signal.SIGKILL)  # a real crash: nothing after this runs
    loop_id, turn_id, _ = told["before_turn"]
    _, _, cut_id = told["before_inference"]

    world = World(home)
    world.model.add(script.text("part two"))
    after = Recorder()
    system = world.open(features=[after])
    try:
        assert system.wait_for_idle("a1", timeout_seconds=10)
        (request,) = world.model.requests
        assert texts(request.context.messages) == ["question", "part one", CONTINUE]
        assert texts(system.transcript("a1")) == ["question", "part one", CONTINUE, "part two"]
        assert after.ids("before_turn") == [(loop_id, turn_id, None, None)]
        ((_, _, resumed_id, _),) = after.ids("before_inference")
        assert resumed_id not in (None, cut_id)
    finally:
        system.close(timeout_seconds=10)
