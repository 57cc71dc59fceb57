"""Tool batches (seed README: committed before any call runs, parallel, ordered results)."""

from __future__ import annotations

import threading

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.types import ServerToolResultBlock, ToolResultMessage

from .conftest import EchoArgs, World, roles, text_of, tool_calls


def results(world_transcript: list[ak.Message]) -> list[ToolResultMessage]:
    return [m for m in world_transcript if isinstance(m, ToolResultMessage)]


def test_results_land_in_call_order_although_the_second_call_finishes_first(
    world: World,
) -> None:
    """The second call finishes first, every time: the first call returns only after the
    second has returned *and* its thread has ended. That thread tells the agent the result
    before it ends, so the second result reaches the agent first; it must still land second
    (invariant I14). Results committed in finish order would land c2, c1."""
    second_returned = threading.Event()
    second_thread: list[threading.Thread] = []

    @ak.tool
    def first(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Finish only after the second call has told the agent its result."""
        assert second_returned.wait(10), "the second call never ran"
        second_thread[0].join(10)
        assert not second_thread[0].is_alive(), "the second call's thread never ended"
        return "first"

    @ak.tool
    def second(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Finish at once."""
        second_thread.append(threading.current_thread())
        second_returned.set()
        return "second"

    world.model.add(
        script.tool_calls(
            script.call("first", {}, call_id="c1"), script.call("second", {}, call_id="c2")
        ),
        script.text("done"),
    )
    system = world.open(tools=[first, second])
    agent = system.create()
    agent.send(ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=10)

    transcript = agent.transcript()
    assert [(r.call_id, text_of(r)) for r in results(transcript)] == [
        ("c1", "first"),
        ("c2", "second"),
    ]
    assert roles(transcript) == ["user", "assistant", "tool", "tool", "assistant"]


def test_the_whole_batch_is_durable_before_any_call_runs(world: World) -> None:
    seen: list[list[str]] = []
    system_box: list[ak.AgentSystem] = []

    @ak.tool
    def look(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Read the pending batch."""
        pending = system_box[0].internals.store.read(lambda tx: tx.calls.pending(ctx.agent_id))
        seen.append([p.call.call_id for p in pending])
        return "ok"

    world.model.add(
        script.tool_calls(
            script.call("look", {}, call_id="a"), script.call("look", {}, call_id="b")
        ),
        script.text("done"),
    )
    system = world.open(tools=[look])
    system_box.append(system)
    agent = system.create()
    agent.send(ak.user("go"))
    agent.wait_for_idle(timeout_seconds=10)

    assert seen
    assert all(set(s) >= {"a", "b"} or s == ["b"] for s in seen)
    assert ["a", "b"] in seen  # the first call to run saw both entries committed
    assert system.internals.store.read(lambda tx: tx.calls.pending(agent.id)) == []


def test_calls_run_in_parallel(world: World) -> None:
    both_running = threading.Barrier(2, timeout=10)

    @ak.tool
    def meet(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Wait for the other call to be running too."""
        both_running.wait()
        return "met"

    world.model.add(
        script.tool_calls(
            script.call("meet", {}, call_id="a"), script.call("meet", {}, call_id="b")
        ),
        script.text("done"),
    )
    system = world.open(tools=[meet])
    agent = system.create()
    agent.send(ak.user("go"))
    agent.wait_for_idle(timeout_seconds=15)

    assert [text_of(r) for r in results(agent.transcript())] == ["met", "met"]


def test_refused_and_failing_calls_become_error_results_and_the_turn_goes_on(
    world: World,
) -> None:
    world.model.add(
        script.tool_calls(
            script.call("missing", {}, call_id="m"),
            script.call("echo", "{not json", call_id="j"),
            script.call("echo", {"text": 5}, call_id="s"),
            script.call("boom", {}, call_id="b"),
            script.call("echo", "", call_id="blank"),
        ),
        script.text("recovered"),
    )
    system = world.open()
    agent = system.create()
    agent.send(ak.user("go"))
    agent.wait_for_idle(timeout_seconds=10)

    answered = {r.call_id: r for r in results(agent.transcript())}
    assert text_of(answered["m"]) == 'Tool "missing" is not available.'
    assert text_of(answered["j"]) == 'The arguments for "echo" were not valid JSON.'
    assert "did not match the schema" in text_of(answered["s"])
    assert "the tool broke" in text_of(answered["b"])
    assert all(answered[k].is_error for k in ("m", "j", "s", "b"))
    assert not answered["blank"].is_error
    assert text_of(answered["blank"]) == "echo "
    assert text_of(agent.transcript()[-1]) == "recovered"


def test_calls_of_a_response_that_did_not_end_for_tools_are_answered_not_run(
    world: World,
) -> None:
    world.model.add(
        script.events(
            script.call("echo", {"text": "x"}, call_id="c"),
            script.done("normal", tokens=script.tokens(10, 1)),
        )
    )
    system = world.open()
    agent = system.create()
    agent.send(ak.user("go"))
    agent.wait_for_idle(timeout_seconds=10)

    transcript = agent.transcript()
    assert world.tool_runs == []
    (result,) = results(transcript)
    assert result.is_error
    assert text_of(result) == "The response ended before this tool call was dispatched."


def test_a_server_tool_call_is_kept_with_its_result_and_never_executed(world: World) -> None:
    world.model.add(
        script.server_tool_call("web_search", {"q": "x"}, result="found", answer="here")
    )
    system = world.open()
    agent = system.create()
    agent.send(ak.user("search"))
    agent.wait_for_idle(timeout_seconds=10)

    (assistant,) = [m for m in agent.transcript() if isinstance(m, ak.AssistantMessage)]
    assert [c.server for c in tool_calls([assistant])] == [True]
    assert any(isinstance(b, ServerToolResultBlock) for b in assistant.content)
    assert results(agent.transcript()) == []
    assert len(world.model.requests) == 1


def test_a_tool_messaging_its_own_agent_does_not_deadlock(world: World) -> None:
    @ak.tool
    def remind(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Queue a follow-up for this same agent."""
        ctx.system.resolve(ctx.agent_id).send(ak.user("follow-up"))
        return "queued"

    world.model.add(script.tool_call("remind", {}), script.text("first"), script.text("second"))
    system = world.open(tools=[remind])
    agent = system.create()
    agent.send(ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=10)

    assert [text_of(m) for m in agent.transcript()][-2:] == ["follow-up", "second"]


def test_waiting_on_your_own_agent_from_a_tool_is_refused(world: World) -> None:
    errors: list[BaseException] = []
    captured: list[ak.AgentSystem] = []

    @ak.tool
    def selfwait(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Try to wait for our own agent through a captured system (refs cannot wait)."""
        assert not hasattr(ctx.system.resolve(ctx.agent_id), "wait_for_idle")
        for wait in (
            lambda: captured[0].resolve(ctx.agent_id).wait_for_idle(),
            lambda: captured[0].resolve(ctx.agent_id).abort(wait=True),
            lambda: captured[0].resolve(ctx.agent_id).compact(wait=True),
        ):
            try:
                wait()
            except ak.AwaitFromOwnLoopError as error:
                errors.append(error)
        return "refused"

    world.model.add(script.tool_call("selfwait", {}), script.text("done"))
    system = world.open(tools=[selfwait])
    captured.append(system)
    agent = system.create()
    agent.send(ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=10)
    assert len(errors) == 3
