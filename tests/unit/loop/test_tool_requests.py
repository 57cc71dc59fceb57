"""Tool request blocks ("SessionInputTool"): a queued user message may carry one
``tool_call_request`` block; the runtime runs that call before asking the model, exactly like
a call the model made, and providers never see the block."""

from __future__ import annotations

import itertools
from typing import Any

import apsw
import msgspec
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

import agentkeep as ak
from agentkeep.actors.agent_actor import AgentActor
from agentkeep.actors.supervisor import Backoff
from agentkeep.delivery import accept_message
from agentkeep.errors import CommitOutcomeUnknownError
from agentkeep.loop.effects import Commit, Emit, StartInference, StartTools
from agentkeep.loop.events import (
    AbortRequested,
    CommitLanded,
    HookFinished,
    Loaded,
    Start,
    ToolFinished,
    WorkAccepted,
)
from agentkeep.loop.machine import AgentLoop
from agentkeep.loop.plans import (
    AnswerCalls,
    CommitToolResult,
    Consumed,
    ConsumeQueue,
    DispatchBatch,
    Snapshot,
)
from agentkeep.loop.texts import ABORTED_CALL
from agentkeep.loop.view import provider_view
from agentkeep.providers import script
from agentkeep.runtime import commit_plans, plan_ports
from agentkeep.types import (
    AgentMessage,
    AssistantMessage,
    Author,
    Message,
    MessageOptions,
    Settings,
    ToolCallBlock,
    ToolCallEnd,
    ToolCallRequestBlock,
    ToolCallStart,
    ToolResultMessage,
    UserMessage,
    is_valid_id,
)
from agentkeep.types.records import BlockRecord, OwedWork, QueuedMessage, UserRecord

from .conftest import World, counting_tool, roles, text_of, tool_calls
from .test_machine_properties import AGENT, LoopMachine

TIMEOUT = 10
INTERRUPTED = "The tool call was interrupted by a restart and was not retried."


def request(name: str = "echo", **arguments: Any) -> ToolCallRequestBlock:
    return ak.tool_request(name, arguments)


def context_of(world: World, number: int = 0) -> tuple[Message, ...]:
    return world.model.requests[number].context.messages


def has_request_block(messages: tuple[Message, ...] | list[Message]) -> bool:
    return any(
        isinstance(block, ToolCallRequestBlock)
        for message in messages
        if isinstance(message, UserMessage)
        for block in message.content
    )


def results(messages: tuple[Message, ...] | list[Message]) -> list[ToolResultMessage]:
    return [m for m in messages if isinstance(m, ToolResultMessage)]


class Lifecycle(ak.Feature):
    """Records, in order, the live events and the inference hooks the agent reports."""

    name = "lifecycle"

    def __init__(self) -> None:
        self.seen: list[str] = []

    def on_event(self, ctx: ak.HookContext, event: Any) -> None:
        self.seen.append(type(event).__name__)

    def before_inference(self, ctx: ak.HookContext) -> None:
        self.seen.append("before_inference")

    def after_inference(self, ctx: ak.HookContext, inference: ak.InferenceInfo) -> None:
        self.seen.append("after_inference")


# -- the request runs before the model is asked ----------------------------------------------


def test_a_requested_call_runs_before_the_model_which_sees_text_call_and_result(
    world: World,
) -> None:
    lifecycle = Lifecycle()
    world.model.add(script.text("done"))
    system = world.open(features=[lifecycle])
    agent = system.create()
    sent = ak.user([ak.TextBlock(text="/echo hi"), request("echo", text="hi")])
    agent.send(sent, metadata={"source": "slash"})
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert world.tool_runs == ["echo:hi"]
    assert len(world.model.requests) == 1
    context = context_of(world)
    assert roles(list(context)) == ["user", "assistant", "tool"]
    assert not has_request_block(context)  # providers never get the control block
    assert context[0] == ak.user("/echo hi")
    (call,) = tool_calls(list(context))
    assert (call.name, msgspec.json.decode(call.arguments)) == ("echo", {"text": "hi"})
    assert is_valid_id(call.call_id)  # a runtime cuid2, not a provider's id
    assert (results(context)[0].call_id, text_of(results(context)[0])) == (call.call_id, "echo hi")

    # The durable conversation keeps the message as it was sent (its identity), the call,
    # its result and the answer.
    transcript = agent.transcript()
    assert roles(transcript) == ["user", "assistant", "tool", "assistant"]
    assert transcript[0] == sent
    assert text_of(transcript[-1]) == "done"
    # Live call events follow the acceptance; no inference lifecycle is invented for it.
    assert lifecycle.seen[:3] == ["ToolCallStart", "ToolCallEnd", "before_inference"]
    assert lifecycle.seen.count("before_inference") == 1
    assert lifecycle.seen.count("after_inference") == 1


def test_a_tool_only_message_adds_no_user_message_and_keeps_its_delivery_identity(
    world: World,
) -> None:
    world.model.add(script.text("ran it"))
    system = world.open()
    agent = system.create()
    first = agent.send(ak.user([request("echo", text="solo")]), id="solomsg")
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert first.created
    assert roles(list(context_of(world))) == ["assistant", "tool"]
    assert roles(agent.transcript()) == ["user", "assistant", "tool", "assistant"]
    records = system.internals.store.read(lambda tx: tx.records.load(agent.id))
    assert isinstance(records[0], UserRecord)
    assert records[0].message_id == "solomsg"

    again = agent.send(ak.user([request("echo", text="solo")]), id="solomsg")
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert (again.id, again.created) == ("solomsg", False)  # an idempotent repeat
    assert world.tool_runs == ["echo:solo"]
    assert len(world.model.requests) == 1
    assert system.internals.store.read(lambda tx: tx.queue.messages(agent.id)) == []


def test_omitted_arguments_mean_an_empty_object(world: World) -> None:
    world.model.add(script.text("ok"))
    system = world.open()
    agent = system.create()
    agent.send(ak.user([ToolCallRequestBlock(name="echo")]))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    (call,) = tool_calls(agent.transcript())
    assert call.arguments == "{}"
    assert world.tool_runs == ["echo:"]


# -- rejected before admission -----------------------------------------------------------------


def _malformed() -> list[tuple[Any, str]]:
    return [
        (
            ak.SystemMessage(content=(ak.TextBlock(text="x"), request())),
            "only user messages can request a tool call; this system message",
        ),
        (
            AgentMessage(author=Author(id="other"), content=(request(),)),  # type: ignore[arg-type]
            "only user messages can request a tool call; this agent message",
        ),
        (
            ak.user([request("echo", text="a"), ak.TextBlock(text="and"), request("boom")]),
            "at most one tool call; this one has 2 tool_call_request blocks",
        ),
        (ak.user([ToolCallRequestBlock(name="")]), "needs the name of a tool"),
        (ak.user([ToolCallRequestBlock(name=None)]), "needs the name of a tool"),  # type: ignore[arg-type]
        (
            ak.user([ToolCallRequestBlock(name="echo", arguments=[1, 2])]),  # type: ignore[arg-type]
            'the arguments of tool_call_request "echo" must be a JSON object',
        ),
        (
            ak.user([ToolCallRequestBlock(name="echo", arguments={"x": object()})]),
            'the arguments of tool_call_request "echo" are not JSON',
        ),
        (
            ak.user([ToolCallRequestBlock(name="echo", namespace="")]),
            'the namespace of tool_call_request "echo"',
        ),
    ]


@pytest.mark.parametrize(("message", "error"), _malformed())
def test_a_malformed_request_is_rejected_before_admission(
    world: World, message: Any, error: str
) -> None:
    world.model.add(script.text("first answered"))
    system = world.open()
    agent = system.create()
    agent.send(ak.user("first"), id="firstmsg")
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    with pytest.raises(ak.InvalidMessageError, match=error):
        agent.steer(message, id="badmsg")
    with pytest.raises(ak.InvalidMessageError, match=error):
        agent.send(message, id="badmsg")

    assert world.tool_runs == []
    assert system.internals.store.read(lambda tx: tx.queue.messages(agent.id)) == []
    assert [text_of(m) for m in agent.transcript()] == ["first", "first answered"]
    # Nothing was admitted: the id is still free, and the earlier message is intact.
    world.model.add(script.text("fine"))
    assert agent.send(ak.user("fixed"), id="badmsg").created
    assert not agent.send(ak.user("first"), id="firstmsg").created
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    assert text_of(agent.transcript()[-1]) == "fine"


class MalformedSteer(ak.Feature):
    """A hook whose action carries two requests: refused like a caller's message."""

    name = "malformedsteer"

    def after_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> list[ak.SteerAction]:
        return [ak.SteerAction(message=ak.user([request(), request()]))]


def test_a_hook_action_with_a_malformed_request_is_not_admitted(world: World) -> None:
    world.model.add(script.text("answer"))
    system = world.open(features=[MalformedSteer()])
    agent = system.create()
    agent.send(ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert world.tool_runs == []
    assert system.internals.store.read(lambda tx: tx.queue.messages(agent.id)) == []
    assert [text_of(m) for m in agent.transcript()] == ["go", "answer"]


def test_the_message_helpers_build_and_refuse_request_blocks() -> None:
    class Args(msgspec.Struct):
        text: str

    block = ak.tool_request("echo", Args(text="s"), namespace="ns")
    assert block == ToolCallRequestBlock(name="echo", arguments={"text": "s"}, namespace="ns")
    assert ak.tool_request("echo").arguments == {}
    assert ak.user([block]).content == (block,)
    with pytest.raises(ak.InvalidMessageError, match="text or image blocks"):
        ak.system([block])  # type: ignore[list-item]


# -- the normal call path ------------------------------------------------------------------------


def test_an_unknown_tool_or_invalid_arguments_get_the_normal_error_then_the_model(
    world: World,
) -> None:
    world.model.add(script.text("no such tool"), script.text("bad arguments"))
    system = world.open()
    agent = system.create()
    agent.send(ak.user([ak.TextBlock(text="try"), request("nope")]))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    agent.send(ak.user([request("echo", text=5)]))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert world.tool_runs == []
    unknown, invalid = results(agent.transcript())
    assert unknown.is_error
    assert invalid.is_error
    assert text_of(unknown) == 'Tool "nope" is not available.'
    assert "did not match the schema" in text_of(invalid)
    assert results(context_of(world, 0)) == [unknown]  # the model was asked after each
    assert results(context_of(world, 1)) == [unknown, invalid]
    assert text_of(agent.transcript()[-1]) == "bad arguments"


class Recorder(ak.Feature):
    """Answers every call directly and records what its four tool-call hooks saw."""

    name = "recorder"

    def __init__(self) -> None:
        self.seen: list[tuple[str, ak.ToolCallInfo]] = []
        self.modes: list[str] = []

    def before_tool_call_transact(self, ctx: ak.HookContext, call: ak.ToolCallInfo) -> None:
        self.seen.append(("before_transact", call))

    def before_tool_call(self, ctx: ak.HookContext, call: ak.ToolCallInfo) -> ak.ToolCallDecision:
        self.seen.append(("before", call))
        self.modes.append(ctx.settings.permission_mode)
        return ak.ToolCallDecision(answer=f"answered {call.name} for the tool")

    def after_tool_call(
        self, ctx: ak.HookContext, call: ak.ToolCallInfo, result: ak.ToolCallResult
    ) -> None:
        self.seen.append(("after", call))

    def after_tool_call_transact(
        self, ctx: ak.HookContext, call: ak.ToolCallInfo, result: ToolResultMessage
    ) -> None:
        self.seen.append(("after_transact", call))


def test_the_tool_call_hooks_apply_and_may_answer_directly(world: World) -> None:
    recorder = Recorder()
    world.model.add(script.text("thanks"))
    system = world.open(features=[recorder])
    agent = system.create()
    agent.send(ak.user([request("echo", text="x")]), permission_mode="read_only")
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert world.tool_runs == []  # the hook answered: the tool never ran
    assert [hook for hook, _ in recorder.seen] == [
        "before_transact",
        "before",
        "after",
        "after_transact",
    ]
    (call,) = tool_calls(agent.transcript())
    assert {info.call_id for _, info in recorder.seen} != {call.call_id}  # the durable id
    assert {info.provider_call_id for _, info in recorder.seen} == {call.call_id}
    assert recorder.modes == ["read_only"]  # the message's settings apply to its call
    assert text_of(results(context_of(world))[0]) == "answered echo for the tool"


def test_an_all_at_once_batch_ends_at_the_tool_request(world: World) -> None:
    recorder = Recorder()
    world.model.add(script.text("after the request"), script.text("after c"))
    system = world.open(features=[recorder], send_mode="all")
    agent = system.create()
    for text, mode, blocks in (
        ("a", "workspace_write", ()),
        ("b", "read_only", (request("echo", text="b"),)),
        ("c", "full_access", ()),
    ):
        system.internals.accept(
            agent.id,
            "send",
            ak.user([ak.TextBlock(text=text), *blocks]),
            options=MessageOptions(permission_mode=mode),  # type: ignore[arg-type]
            start=False,
        )
    system.start(agent.id)
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    # a and b joined together; c waited for the next batch, after the call's result.
    assert [text_of(m) for m in context_of(world, 0)] == [
        "a",
        "b",
        "",
        "answered echo for the tool",
    ]
    assert roles(list(context_of(world, 0))) == ["user", "user", "assistant", "tool"]
    assert [text_of(m) for m in context_of(world, 1)][-2:] == ["after the request", "c"]
    assert recorder.modes == ["read_only"]  # c's settings did not replace b's
    assert system.settings(agent.id).permission_mode == "full_access"


# -- steering and abort after the call, as after a model's call --------------------------------


def test_steering_queued_during_the_call_joins_before_the_model_is_asked(world: World) -> None:
    world.model.add(script.text("both seen"))
    system = world.open()
    agent = system.create()
    agent.send(ak.user([request("wait", text="g")]))
    gate = world.gate("g")
    assert gate.entered.wait(TIMEOUT)
    agent.steer(ak.user("steer meanwhile"))
    gate.release.set()
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert len(world.model.requests) == 1
    assert roles(list(context_of(world))) == ["assistant", "tool", "user"]
    assert text_of(context_of(world)[-1]) == "steer meanwhile"
    assert text_of(agent.transcript()[-1]) == "both seen"


def test_an_abort_during_the_call_answers_it_and_asks_no_model(world: World) -> None:
    system = world.open()
    agent = system.create()
    agent.send(ak.user([ak.TextBlock(text="run it"), request("wait", text="g")]))
    gate = world.gate("g")
    assert gate.entered.wait(TIMEOUT)
    agent.abort(wait=True, timeout_seconds=TIMEOUT)
    gate.release.set()

    assert world.model.requests == ()
    transcript = agent.transcript()
    assert roles(transcript) == ["user", "assistant", "tool"]
    assert text_of(transcript[-1]) == ABORTED_CALL
    assert system.internals.store.read(
        lambda tx: (tx.calls.pending(agent.id), tx.facts.read_owed(agent.id))
    ) == (
        [],
        None,
    )
    # The next message carries on with the aborted call in context; it is never re-run.
    world.model.add(script.text("next"))
    agent.send(ak.user("next"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    assert roles(list(context_of(world))) == ["user", "assistant", "tool", "user"]
    assert world.tool_runs == ["wait:g"]


# -- recovery ----------------------------------------------------------------------------------


class InjectedCrashError(RuntimeError):
    """Raised inside the agent actor on purpose."""


def test_a_crash_before_dispatch_recovers_the_recorded_call_with_the_same_id(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    crashed: list[str] = []
    original = AgentActor._carry_out

    def carry_out(self: AgentActor, effect: Any) -> Any:
        if isinstance(effect, Commit) and isinstance(effect.plan, DispatchBatch) and not crashed:
            crashed.append(effect.plan.calls[0].call.call_id)
            raise InjectedCrashError("the agent actor crashed before the dispatch")
        return original(self, effect)

    monkeypatch.setattr(AgentActor, "_carry_out", carry_out)
    world.model.add(script.text("recovered"))
    system = world.open(restart_backoff=Backoff(initial_seconds=0))
    agent = system.create()
    agent.send(ak.user([request("echo", text="once")]))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert len(crashed) == 1
    assert world.tool_runs == ["echo:once"]
    transcript = agent.transcript()
    assert [c.call_id for c in tool_calls(transcript)] == crashed
    assert [r.call_id for r in results(transcript)] == crashed
    assert text_of(transcript[-1]) == "recovered"


def test_a_restart_between_acceptance_and_dispatch_runs_the_recorded_call(world: World) -> None:
    system = world.open()
    agent = system.create()
    system.internals.accept(agent.id, "send", ak.user([request("echo", text="r")]), start=False)
    consume = ConsumeQueue(
        queue="send",
        mode="one-at-a-time",
        defaults=Settings(provider="local", model="gym-1"),
        owed=OwedWork(stage="inference"),
        call_id="recordedcall",
    )
    system.internals.store.transact(
        lambda tx: commit_plans.execute(tx, agent.id, consume, plan_ports.KeepEverything())
    )
    system.close(timeout_seconds=TIMEOUT)

    world.model.add(script.text("after restart"))
    reopened = world.open()  # resumes the agent: it owes work
    assert reopened.wait_for_idle(agent.id, timeout_seconds=TIMEOUT)

    assert world.tool_runs == ["echo:r"]
    transcript = reopened.transcript(agent.id)
    assert roles(transcript) == ["user", "assistant", "tool", "assistant"]
    assert [c.call_id for c in tool_calls(transcript)] == ["recordedcall"]
    assert [r.call_id for r in results(transcript)] == ["recordedcall"]


def _crash_after_the_tool_ran(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    crashes: list[int] = []
    original = AgentActor._feed

    def feed(self: AgentActor, event: Any) -> None:
        if isinstance(event, ToolFinished) and not crashes:
            crashes.append(1)
            raise InjectedCrashError("the agent actor crashed before committing the result")
        original(self, event)

    monkeypatch.setattr(AgentActor, "_feed", feed)
    return crashes


@pytest.mark.parametrize("durable", [True, False])
def test_after_dispatch_the_tools_durability_decides(
    world: World, monkeypatch: pytest.MonkeyPatch, durable: bool
) -> None:
    runs: list[str] = []

    count = counting_tool(runs, durable=durable)

    crashes = _crash_after_the_tool_ran(monkeypatch)
    world.model.add(script.text("done"))
    system = world.open(tools=[count], restart_backoff=Backoff(initial_seconds=0))
    agent = system.create()
    agent.send(ak.user([request("count", text="x")]))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert crashes == [1]
    (result,) = results(agent.transcript())
    if durable:
        assert runs == ["x", "x"]  # may run again after a crash
        assert text_of(result) == "counted x"
    else:
        assert runs == ["x"]  # never twice
        assert (text_of(result), result.is_error) == (INTERRUPTED, True)
    assert text_of(agent.transcript()[-1]) == "done"


# -- the pure core -------------------------------------------------------------------------------

DEFAULTS = Settings(provider="local", model="gym-1")


def _core_consuming(message: UserMessage) -> tuple[AgentLoop, ConsumeQueue, QueuedMessage]:
    counter = itertools.count()
    loop = AgentLoop("agent", new_id=lambda: f"id{next(counter)}", defaults=DEFAULTS)
    queued = QueuedMessage(id="m1", queue="send", message=message, seq=1)
    loop.handle(WorkAccepted(message=queued))
    loop.handle(Loaded(snapshot=Snapshot(queued=(queued,))))
    (commit,) = loop.handle(HookFinished(hook="before_turn"))
    assert isinstance(commit, Commit)
    assert isinstance(commit.plan, ConsumeQueue)
    return loop, commit.plan, queued


def _landed_consumption(plan: ConsumeQueue, queued: QueuedMessage) -> CommitLanded:
    request_block = next(b for b in queued.message.content if isinstance(b, ToolCallRequestBlock))
    call = ToolCallBlock(call_id=plan.call_id, name=request_block.name, arguments="{}")
    records = (UserRecord(message_id=queued.id, message=queued.message), BlockRecord(block=call))
    return CommitLanded(plan=plan, value=Consumed(records=records, settings=DEFAULTS, remaining=()))


def test_the_core_dispatches_a_consumed_request_and_reports_the_call() -> None:
    loop, plan, queued = _core_consuming(ak.user([request("echo")]))
    effects = loop.handle(_landed_consumption(plan, queued))

    events = [e.event for e in effects if isinstance(e, Emit)]
    assert events == [
        ToolCallStart(call_id=plan.call_id, name="echo"),
        ToolCallEnd(call_id=plan.call_id, arguments="{}"),
    ]
    (dispatch,) = [e.plan for e in effects if isinstance(e, Commit)]
    assert isinstance(dispatch, DispatchBatch)
    assert [p.call.call_id for p in dispatch.calls] == [plan.call_id]
    assert not [e for e in effects if isinstance(e, StartInference)]


def test_an_abort_before_the_dispatch_answers_the_call_instead() -> None:
    loop, plan, queued = _core_consuming(ak.user([request("echo")]))
    loop.handle(AbortRequested())  # arrives while the consumption commits
    effects = loop.handle(_landed_consumption(plan, queued))

    (answer,) = [e.plan for e in effects if isinstance(e, Commit)]
    assert isinstance(answer, AnswerCalls)
    assert [(r.call_id, text_of(r)) for r in answer.results] == [(plan.call_id, ABORTED_CALL)]
    assert [p.call.call_id for p in answer.calls] == [plan.call_id]
    assert not [e for e in effects if isinstance(e, StartTools | StartInference)]


def test_an_abort_while_the_dispatch_commits_starts_no_call() -> None:
    loop, plan, queued = _core_consuming(ak.user([request("echo")]))
    effects = loop.handle(_landed_consumption(plan, queued))
    (dispatch,) = [e.plan for e in effects if isinstance(e, Commit)]
    loop.handle(AbortRequested())
    effects = loop.handle(CommitLanded(plan=dispatch))

    assert not [e for e in effects if isinstance(e, StartTools)]
    (result,) = [e.plan for e in effects if isinstance(e, Commit)]
    assert isinstance(result, CommitToolResult)
    assert text_of(result.result) == ABORTED_CALL


# -- the property machine, with tool requests among the messages --------------------------------


class RequestMachine(LoopMachine):
    """The loop core under random interleavings (``test_machine_properties``), where some
    accepted messages request a durable or a non-durable tool call."""

    @rule(queue=st.sampled_from(["send", "steering"]), fragile=st.booleans())
    def accept_request(self, queue: str, fragile: bool) -> None:
        message_id = f"msg{next(self.sequence)}"
        name = "fragile_tool" if fragile else "durable_tool"
        message = ak.user([ak.TextBlock(text=message_id), request(name, call=message_id)])

        def work(tx: Any) -> Any:
            return accept_message(
                tx,
                AGENT,
                queue=queue,  # type: ignore[arg-type]
                message=message,
                message_id=message_id,
                options=MessageOptions(),
                metadata=None,
            )

        try:
            _, queued = self.disk.transact(work)
        except apsw.IOError:
            return  # refused: the caller was told, nothing was accepted
        except CommitOutcomeUnknownError:
            self.accepted.append(message_id)  # it landed; the system wakes the agent
            self.process.feed(Start())
            return
        self.accepted.append(message_id)
        self.process.feed(WorkAccepted(message=queued))

    @invariant()
    def requests_never_reach_the_provider_and_run_right_after_their_message(self) -> None:
        records, _queued, _pending, _owed = self.durable()
        assert not has_request_block(list(provider_view(records)))
        for position, record in enumerate(records):
            if isinstance(record, UserRecord) and has_request_block([record.message]):
                follower = records[position + 1] if position + 1 < len(records) else None
                assert isinstance(follower, BlockRecord), "a request without its call"
                assert isinstance(follower.block, ToolCallBlock)


RequestMachine.TestCase.settings = settings(
    max_examples=int(__import__("os").environ.get("LOOP_MACHINE_EXAMPLES", "40")),
    stateful_step_count=40,
    deadline=None,
)
test_tool_requests_under_random_interleavings = RequestMachine.TestCase


def test_the_view_drops_a_tool_only_message_without_merging_its_neighbours() -> None:
    call = ToolCallBlock(call_id="c", name="echo", arguments="{}")
    records = [
        UserRecord(message_id="m0", message=ak.user("q")),
        BlockRecord(block=ak.TextBlock(text="a")),
        UserRecord(message_id="m1", message=ak.user([request()])),
        BlockRecord(block=call),
    ]
    view = provider_view(records)
    assert [type(m) for m in view] == [UserMessage, AssistantMessage, AssistantMessage]
    assert view[2] == AssistantMessage(content=(call,))


def test_a_plain_string_in_a_user_message_list_is_a_text_block() -> None:
    message = ak.user(["/calc", ak.tool_request("add", {"a": 1, "b": 2})])
    assert message.content[0] == ak.TextBlock(text="/calc")
    assert message.content[1] == ak.ToolCallRequestBlock(name="add", arguments={"a": 1, "b": 2})
    with pytest.raises(ak.InvalidMessageError, match="got 3"):
        ak.user(["text", 3])  # type: ignore[list-item]
