"""Drains and steering that reach a steerable or reloadable call at the edges of its life:
before its tool started (its ``before_tool_call`` still deciding) and between its start and
its first write. Each interleaving is ordered by ``threading.Event`` gates, never by sleeps.

A cancelled call's child that ignores its cancellation is abandoned after the grace when its
agent stops (``AgentChildren.stop_all``), so ``shutdown`` returns while a gate still holds it.
"""

from __future__ import annotations

import threading
from typing import Any

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.types import Context

from .conftest import EchoArgs, World, text_of
from .test_tool_lifetime_flags import DRAINED, STEERED, Seen, cancellable, tool_results


class HeldCalls(ak.Feature):
    """Holds the ``before_tool_call`` of ``tool``'s calls until released: the call's child
    runs, its tool has not started. Signals when the held call's work is over."""

    name = "held"

    def __init__(self, tool: str) -> None:
        self.tool = tool
        self.entered = threading.Event()
        self.release = threading.Event()
        self.finished = threading.Event()

    def before_tool_call(self, ctx: ak.HookContext, call: ak.ToolCallInfo) -> None:
        if call.call.name == self.tool:
            self.entered.set()
            assert self.release.wait(30), "never released"

    def after_tool_call(
        self, ctx: ak.HookContext, call: ak.ToolCallInfo, result: ak.ToolCallResult
    ) -> None:
        if call.call.name == self.tool:
            self.finished.set()


def runs_once_more(runs: list[str]) -> ak.Tool[Any, Any]:
    """The next process's ``reload`` tool: notes its call id and the attempts it finds."""

    @ak.tool(name="reload", reloadable=True)
    def reload(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """The next process's run: the same call, its store kept."""
        runs.append(ctx.call_id)
        return f"reloaded after {ctx.kv.read('attempts')} attempt"

    return reload


def test_a_drain_before_a_reloadable_tool_started_leaves_its_call_pending(
    world: World,
) -> None:
    seen = Seen()
    held = HeldCalls("reload")
    world.model.add(
        script.tool_calls(script.call("reload", {}, call_id="c1")), script.text("after restart")
    )
    system = world.open(tools=[cancellable("reload", seen, reloadable=True)], features=[held])
    agent = system.create()
    agent.send(ak.user("go"))
    assert held.entered.wait(10)
    system.shutdown(timeout_seconds=30)  # the drain parks the call; its held child is left
    held.release.set()
    assert held.finished.wait(10)
    assert seen.notes == []  # cancelled before its tool started: it never ran here

    runs: list[str] = []
    reopened = world.open(tools=[runs_once_more(runs)])
    assert reopened.wait_for_idle(agent.id, timeout_seconds=10)
    assert len(runs) == 1  # left pending, without a result: the next process ran it
    assert tool_results(reopened, agent.id) == [("c1", "reloaded after None attempt", False)]
    assert text_of(reopened.transcript(agent.id)[-1]) == "after restart"


def test_a_drain_between_a_reloadable_call_s_start_and_its_write_refuses_the_write(
    world: World,
) -> None:
    started, write_now, refused = threading.Event(), threading.Event(), threading.Event()

    @ak.tool(name="reload", reloadable=True)
    def checkpoint(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Start, wait to be told, then write a checkpoint."""
        started.set()
        assert write_now.wait(30), "never told to write"
        try:
            ctx.kv.write("attempts", 1)
        except ak.ExpiredScopeError:
            refused.set()  # the drain abandoned this execution: its store expired
            raise
        return "wrote"

    world.model.add(
        script.tool_calls(script.call("reload", {}, call_id="c1")), script.text("after restart")
    )
    system = world.open(tools=[checkpoint])
    agent = system.create()
    agent.send(ak.user("go"))
    assert started.wait(10)
    system.shutdown(timeout_seconds=30)
    write_now.set()
    assert refused.wait(10)

    runs: list[str] = []
    reopened = world.open(tools=[runs_once_more(runs)])
    assert reopened.wait_for_idle(agent.id, timeout_seconds=10)
    assert tool_results(reopened, agent.id) == [("c1", "reloaded after None attempt", False)]


def test_a_drain_before_a_steerable_tool_started_answers_its_call_at_once(
    world: World,
) -> None:
    seen = Seen()
    held = HeldCalls("watch")
    watch = cancellable("watch", seen, steerable=True)
    world.model.add(
        script.tool_calls(script.call("watch", {}, call_id="c1")), script.text("after restart")
    )
    system = world.open(tools=[watch], features=[held])
    agent = system.create()
    agent.send(ak.user("go"))
    assert held.entered.wait(10)
    system.shutdown(timeout_seconds=30)  # answered as drained, never waited for
    held.release.set()
    assert held.finished.wait(10)
    assert seen.notes == []

    reopened = world.open(tools=[watch])
    assert reopened.wait_for_idle(agent.id, timeout_seconds=10)
    assert tool_results(reopened, agent.id) == [("c1", DRAINED, True)]
    assert text_of(reopened.transcript(agent.id)[-1]) == "after restart"
    assert seen.notes == []  # answered: the next process does not run it


def test_steering_before_a_steerable_tool_started_answers_its_call_at_once(
    world: World,
) -> None:
    seen = Seen()
    held = HeldCalls("watch")
    world.model.add(
        script.tool_calls(script.call("watch", {}, call_id="c1")), script.text("steered")
    )
    system = world.open(tools=[cancellable("watch", seen, steerable=True)], features=[held])
    agent = system.create()
    agent.send(ak.user("go"))
    assert held.entered.wait(10)
    agent.steer(ak.user("change course"))
    # Answered at once; the next request waits for the held child until its grace passed.
    assert agent.wait_for_idle(timeout_seconds=10)
    assert tool_results(system, agent.id) == [("c1", STEERED, True)]
    held.release.set()
    assert held.finished.wait(10)
    assert seen.notes == []  # cancelled before its tool started: it never ran
    assert [text_of(m) for m in system.transcript(agent.id)][-2:] == ["change course", "steered"]


def test_steering_accepted_while_the_model_asks_for_a_steerable_call_interrupts_it(
    world: World,
) -> None:
    asked, steered = threading.Event(), threading.Event()

    def respond(context: Context) -> script.ScriptedResponse:
        # The request is made, its response not streamed: the steering is taken by the
        # loop (told before ``steer`` returns) ahead of the response's calls.
        asked.set()
        assert steered.wait(30), "never steered"
        return script.tool_calls(script.call("watch", {}, call_id="c1"))

    world.model.add(respond, script.text("steered"))
    system = world.open(tools=[cancellable("watch", Seen(), steerable=True)])
    agent = system.create()
    agent.send(ak.user("go"))
    assert asked.wait(10)
    agent.steer(ak.user("change course"))
    steered.set()
    # Not left waiting behind a call that runs until cancelled: answered as steered.
    assert agent.wait_for_idle(timeout_seconds=10)
    assert tool_results(system, agent.id) == [("c1", STEERED, True)]
    assert [text_of(m) for m in system.transcript(agent.id)][-2:] == ["change course", "steered"]
