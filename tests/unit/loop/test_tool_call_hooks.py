"""The four hooks that bracket one tool call (seed: "A tool call is bracketed by four hooks";
docs/decisions.md, "Tool-call hooks")."""

from __future__ import annotations

from typing import Any

import pytest

import agentkeep as ak
from agentkeep.actors.agent_actor import AgentActor
from agentkeep.actors.supervisor import Backoff
from agentkeep.loop.events import ToolFinished
from agentkeep.loop.texts import FAILED_TURN_CALL
from agentkeep.persistence.kv import ScopedKV
from agentkeep.providers import script
from agentkeep.types import Message, ToolResultMessage

from .conftest import EchoArgs, World, counting_tool, roles, text_of

TIMEOUT = 10


def results(transcript: list[Message]) -> list[ToolResultMessage]:
    return [m for m in transcript if isinstance(m, ToolResultMessage)]


def feature_kv(system: ak.AgentSystem, agent_id: str, feature: str) -> ScopedKV:
    return ScopedKV.through(system.internals.store, "agent", agent_id, "kv", "feature", feature)


def last_request_texts(world: World) -> list[str]:
    return [text_of(m) for m in world.model.requests[-1].context.messages]


class Recorder(ak.Feature):
    """Records what its tool-call hooks saw; answers ``before_tool_call`` with ``decision``."""

    def __init__(self, name: str, decision: Any = None) -> None:
        self.name = name
        self.decision = decision
        self.before: list[ak.ToolCallInfo] = []
        self.after: list[tuple[ak.ToolCallInfo, ak.ToolCallResult]] = []
        self.dispatched: list[ak.ToolCallInfo] = []
        self.appended: list[tuple[ak.ToolCallInfo, ToolResultMessage]] = []

    def before_tool_call_transact(self, ctx: ak.HookContext, call: ak.ToolCallInfo) -> None:
        self.dispatched.append(call)

    def before_tool_call(
        self, ctx: ak.HookContext, call: ak.ToolCallInfo
    ) -> ak.ToolCallDecision | None:
        self.before.append(call)
        decision = self.decision
        return decision(call) if callable(decision) else decision

    def after_tool_call(
        self, ctx: ak.HookContext, call: ak.ToolCallInfo, result: ak.ToolCallResult
    ) -> None:
        self.after.append((call, result))

    def after_tool_call_transact(
        self, ctx: ak.HookContext, call: ak.ToolCallInfo, result: ToolResultMessage
    ) -> None:
        self.appended.append((call, result))


def run_one(world: World, features: list[ak.Feature], *calls: Any, **options: Any) -> ak.Agent:
    world.model.add(script.tool_calls(*calls), script.text("done"))
    system = world.open(features=features, **options)
    agent = system.create()
    agent.send(ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    return agent


# -- before_tool_call / after_tool_call ------------------------------------------------------


def test_a_hook_that_leaves_calls_alone_sees_them_validated_and_observes_the_result(
    world: World,
) -> None:
    recorder = Recorder("rec")
    agent = run_one(world, [recorder], script.call("echo", {"text": "x"}, call_id="c1"))

    assert world.tool_runs == ["echo:x"]
    (seen,) = recorder.before
    assert (seen.name, seen.provider_call_id, seen.resumed) == ("echo", "c1", False)
    assert seen.arguments == EchoArgs(text="x")
    assert seen.tool is not None
    assert seen.tool.name == "echo"
    assert seen.call == seen.requested
    assert seen.cancel is not None
    assert not seen.cancel.cancelled
    ((call, result),) = recorder.after
    assert call.call_id == seen.call_id
    assert (result.executed, result.is_error, result.value) == (True, False, "echo x")
    assert text_of(results(agent.transcript())[0]) == "echo x"


def test_a_decision_replaces_the_arguments(world: World) -> None:
    recorder = Recorder("rec", ak.ToolCallDecision(arguments=EchoArgs(text="changed")))
    agent = run_one(world, [recorder], script.call("echo", {"text": "x"}))

    assert world.tool_runs == ["echo:changed"]
    assert text_of(results(agent.transcript())[0]) == "echo changed"
    ((call, result),) = recorder.after
    assert call.arguments == EchoArgs(text="changed")
    assert call.requested.arguments == '{"text":"x"}'
    assert result.value == "echo changed"


def test_a_decision_redirects_to_another_tool(world: World) -> None:
    recorder = Recorder("rec", ak.ToolCallDecision(tool="echo", arguments={"text": "safe"}))
    agent = run_one(world, [recorder], script.call("boom", {}))

    assert world.tool_runs == ["echo:safe"]
    (result,) = results(agent.transcript())
    assert (text_of(result), result.is_error) == ("echo safe", False)
    assert recorder.after[0][0].name == "echo"


def test_an_amendment_is_validated_like_a_call_the_model_made(world: World) -> None:
    def decide(call: ak.ToolCallInfo) -> ak.ToolCallDecision:
        if call.provider_call_id == "unknown":
            return ak.ToolCallDecision(tool="nope")
        return ak.ToolCallDecision(arguments='{"text": 5}')

    recorder = Recorder("rec", decide)
    agent = run_one(
        world,
        [recorder],
        script.call("echo", {"text": "a"}, call_id="unknown"),
        script.call("echo", {"text": "b"}, call_id="invalid"),
    )

    assert world.tool_runs == []
    answered = {r.call_id: r for r in results(agent.transcript())}
    assert text_of(answered["unknown"]) == 'Tool "nope" is not available.'
    assert "did not match the schema" in text_of(answered["invalid"])
    assert all(r.is_error for r in answered.values())
    assert [r.executed for _, r in recorder.after] == [False, False]
    assert text_of(agent.transcript()[-1]) == "done"


def test_answering_directly_never_runs_the_tool_and_the_model_sees_the_answer(
    world: World,
) -> None:
    recorder = Recorder("guard", ak.ToolCallDecision(answer="not today", is_error=True))
    agent = run_one(world, [recorder], script.call("echo", {"text": "x"}, call_id="c1"))

    assert world.tool_runs == []
    (result,) = results(agent.transcript())
    assert (result.call_id, text_of(result), result.is_error) == ("c1", "not today", True)
    assert "not today" in last_request_texts(world)
    ((_, observed),) = recorder.after
    assert (observed.executed, observed.answered_by) == (False, "guard")


class FailingBefore(ak.Feature):
    name = "failing"

    def before_tool_call(self, ctx: ak.HookContext, call: ak.ToolCallInfo) -> None:
        raise RuntimeError("policy store down")


def test_a_failing_before_tool_call_gives_the_call_an_error_and_the_tool_never_runs(
    world: World,
) -> None:
    recorder = Recorder("after")
    agent = run_one(world, [FailingBefore(), recorder], script.call("echo", {"text": "x"}))

    assert world.tool_runs == []
    assert recorder.before == []  # the chain stopped at the failure
    (result,) = results(agent.transcript())
    assert result.is_error
    assert text_of(result) == (
        'The before_tool_call hook of feature "failing" failed: policy store down'
    )
    assert len(recorder.after) == 1  # the failed call is still observed
    assert text_of(agent.transcript()[-1]) == "done"  # the turn goes on


class FailingAfter(ak.Feature):
    name = "failing"

    def after_tool_call(
        self, ctx: ak.HookContext, call: ak.ToolCallInfo, result: ak.ToolCallResult
    ) -> None:
        raise RuntimeError("observer broke")


def test_a_failing_after_tool_call_is_isolated(world: World) -> None:
    recorder = Recorder("rec")
    agent = run_one(world, [FailingAfter(), recorder], script.call("echo", {"text": "x"}))

    assert world.tool_runs == ["echo:x"]
    assert text_of(results(agent.transcript())[0]) == "echo x"
    assert len(recorder.after) == 1
    assert text_of(agent.transcript()[-1]) == "done"


def test_features_chain_amendments_in_order_and_the_first_answer_wins(world: World) -> None:
    first = Recorder("first", ak.ToolCallDecision(arguments={"text": "one"}))
    second = Recorder(
        "second", lambda call: ak.ToolCallDecision(answer=f"second saw {call.arguments.text}")
    )
    third = Recorder("third", ak.ToolCallDecision(answer="third"))
    agent = run_one(world, [first, second, third], script.call("echo", {"text": "x"}))

    assert world.tool_runs == []
    assert text_of(results(agent.transcript())[0]) == "second saw one"
    assert second.before[0].requested.arguments == '{"text":"x"}'
    assert third.before == []  # the first answer wins: later features are not asked
    observed = [(r.answered_by, c.arguments) for f in (first, second, third) for c, r in f.after]
    assert observed == [("second", EchoArgs(text="one"))] * 3


def test_a_decision_must_amend_or_answer() -> None:
    with pytest.raises(ValueError, match="needs tool, arguments, permission_mode or answer"):
        ak.ToolCallDecision()
    with pytest.raises(ValueError, match="either amends the call or answers it"):
        ak.ToolCallDecision(tool="echo", answer="both")


# -- the transactional hooks -----------------------------------------------------------------


class Journal(ak.Feature):
    """Writes its kv inside the dispatch and result transactions."""

    name = "journal"

    def __init__(self) -> None:
        self.retained: list[Any] = []

    def before_tool_call_transact(self, ctx: ak.HookContext, call: ak.ToolCallInfo) -> None:
        ctx.kv.write(f"dispatched:{call.provider_call_id}", call.name)
        ctx.call_kv.write("note", "from dispatch")
        self.retained.append(ctx.kv)

    def before_tool_call(self, ctx: ak.HookContext, call: ak.ToolCallInfo) -> None:
        assert ctx.call_kv.read("note") == "from dispatch"

    def after_tool_call_transact(
        self, ctx: ak.HookContext, call: ak.ToolCallInfo, result: ToolResultMessage
    ) -> None:
        ctx.kv.write(f"answered:{call.provider_call_id}", text_of(result))
        note = ctx.call_kv.read("note")  # absent for a call answered without a dispatch
        if note is not None:
            ctx.kv.write(f"note:{call.provider_call_id}", note)


class Refuse(ak.Feature):
    """Fails one transactional hook while ``failing`` is set."""

    name = "refuse"

    def __init__(self, hook: str) -> None:
        self.hook = hook
        self.failing = True

    def before_tool_call_transact(self, ctx: ak.HookContext, call: ak.ToolCallInfo) -> None:
        if self.failing and self.hook == "before":
            raise RuntimeError("dispatch refused")

    def after_tool_call_transact(
        self, ctx: ak.HookContext, call: ak.ToolCallInfo, result: ToolResultMessage
    ) -> None:
        if self.failing and self.hook == "after":
            raise RuntimeError("result refused")


def test_transactional_hooks_write_atomically_with_dispatch_and_result(world: World) -> None:
    journal = Journal()
    seen_during_call: list[Any] = []
    box: list[ak.AgentSystem] = []

    @ak.tool
    def look(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Read the journal while running."""
        kv = feature_kv(box[0], ctx.agent_id, "journal")
        seen_during_call.append(kv.read("dispatched:c1"))
        return "looked"

    world.model.add(script.tool_call("look", {}, call_id="c1"), script.text("done"))
    system = world.open(features=[journal], tools=[look])
    box.append(system)
    agent = system.create()
    agent.send(ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert seen_during_call == ["look"]  # durable with the batch, before the call ran
    kv = feature_kv(system, agent.id, "journal")
    assert kv.read("answered:c1") == "looked"
    assert kv.read("note:c1") == "from dispatch"  # the call's store lived until its result
    area = ScopedKV.through(system.internals.store, "agent", agent.id, "call")
    assert area.list() == []
    assert system.internals.store.read(lambda tx: tx.kv.scan(area.prefix)) == []
    with pytest.raises(ak.ExpiredScopeError):  # a transactional context expires on return
        journal.retained[0].write("late", 1)


def test_a_failing_before_tool_call_transact_dispatches_nothing_and_fails_the_turn(
    world: World,
) -> None:
    recorder = Recorder("rec")
    agent = run_one(
        world, [Journal(), Refuse("before"), recorder], script.call("echo", {}, call_id="c1")
    )

    assert world.tool_runs == []
    assert recorder.before == []
    system = world.systems[-1]
    # The dispatch's writes rolled back with it; the failed turn's answer to the call is a
    # durable result, so after_tool_call_transact ran in the transaction that appended it.
    journal = feature_kv(system, agent.id, "journal").list()
    assert journal == [("answered:c1", FAILED_TURN_CALL)]
    assert [text_of(r) for _, r in recorder.appended] == [FAILED_TURN_CALL]
    assert system.internals.store.read(lambda tx: tx.calls.pending(agent.id)) == []
    transcript = agent.transcript()
    assert text_of(results(transcript)[0]) == FAILED_TURN_CALL
    assert text_of(transcript[-1]) == "The last turn failed: dispatch refused"


def test_a_failing_after_tool_call_transact_leaves_neither_result_nor_writes_and_blocks(
    world: World,
) -> None:
    refuse = Refuse("after")
    recorder = Recorder("rec")
    agent = run_one(world, [Journal(), refuse, recorder], script.call("echo", {}, call_id="c1"))
    system = world.systems[-1]

    assert world.tool_runs == ["echo:"]
    kv = feature_kv(system, agent.id, "journal")
    assert kv.read("dispatched:c1") == "echo"
    assert kv.read("answered:c1") is None  # rolled back with the result
    assert roles(agent.transcript()) == ["user", "assistant"]
    pending = system.internals.store.read(lambda tx: tx.calls.pending(agent.id))
    assert [p.call.call_id for p in pending] == ["c1"]  # the batch stays, to resume
    assert system.internals.store.read(lambda tx: tx.facts.read_owed(agent.id)) is not None

    refuse.failing = False
    system.start(agent.id)
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    # Resumed: the non-durable call is answered, not rerun, and the hook sees that result.
    interrupted = "The tool call was interrupted by a restart and was not retried."
    assert world.tool_runs == ["echo:"]
    assert kv.read("answered:c1") == interrupted
    assert len(recorder.dispatched) == 1  # a resumed batch is not dispatched again
    assert [text_of(r) for _, r in recorder.appended] == [interrupted]
    assert roles(agent.transcript()) == ["user", "assistant", "tool", "assistant"]


def test_a_restarted_durable_call_runs_before_tool_call_again(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[str] = []

    count = counting_tool(runs)

    # Crash the agent actor once when the call's result arrives, before it is committed.
    crashes: list[int] = []
    original = AgentActor._feed

    def feed(self: AgentActor, event: Any) -> None:
        if isinstance(event, ToolFinished) and not crashes:
            crashes.append(1)
            raise RuntimeError("the agent actor crashed before committing the result")
        original(self, event)

    monkeypatch.setattr(AgentActor, "_feed", feed)
    recorder = Recorder("rec")
    agent = run_one(
        world,
        [recorder],
        script.call("count", {"text": "x"}, call_id="c1"),
        tools=[count],
        restart_backoff=Backoff(initial_seconds=0),
    )

    assert crashes == [1]
    assert runs == ["x", "x"]
    assert [c.resumed for c in recorder.before] == [False, True]
    assert len(recorder.dispatched) == 1
    assert [text_of(r) for _, r in recorder.appended] == ["counted x"]  # committed once
    assert [text_of(r) for r in results(agent.transcript())] == ["counted x"]
    assert text_of(agent.transcript()[-1]) == "done"


class FlakyTools(ak.Feature):
    """Offers its tool to the model, then fails when the call is about to run."""

    name = "flaky"

    def __init__(self, tool: ak.Tool[Any, Any]) -> None:
        self.tool = tool
        self.calls = 0

    def tools(self, ctx: ak.HookContext) -> list[ak.Tool[Any, Any]]:
        self.calls += 1
        if self.calls == 2:  # the first request, then the batch's execution
            raise RuntimeError("tool registry unavailable")
        return [self.tool]


def test_a_tools_hook_failing_at_execution_answers_the_calls_with_its_error(
    world: World,
) -> None:
    @ak.tool
    def extra(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """A feature's tool."""
        world.tool_runs.append("extra")
        return "extra"

    recorder = Recorder("rec")
    agent = run_one(world, [FlakyTools(extra), recorder], script.call("extra", {}))

    assert world.tool_runs == []
    assert recorder.before == []  # the call never resolved: no tool hook
    (result,) = results(agent.transcript())
    assert (text_of(result), result.is_error) == ("tool registry unavailable", True)
    assert text_of(agent.transcript()[-1]) == "done"
