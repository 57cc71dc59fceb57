"""Per-call child actors are supervised under their agent.

Streams, tool calls and compactions run in one-shot child actors. When their agent's actor
stops (delete, close, passivation) or crashes (and is restarted), its children are cancelled
and stopped first, so none is left in pykka's registry and a restarted agent never runs beside
its previous incarnation's children. A child that dies without its report is answered for
(a failed response, an error result), never lost.

The tool below honours cancellation but takes ``UNWIND`` to clean up: that is work it does,
not a way of ordering threads. Stopping waits for it (its grace is longer); the old code
returned while it was still running.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pykka
import pytest

import agentkeep as ak
from agentkeep.actors.agent_actor import AgentActor
from agentkeep.actors.children import ToolCallActor
from agentkeep.actors.inference_worker import running_streams
from agentkeep.actors.supervisor import Backoff
from agentkeep.loop.events import CommitFailed, CommitLanded, Event, WorkAccepted
from agentkeep.loop.plans import CommitToolResult, Plan
from agentkeep.providers import script
from agentkeep.types import Context

from .conftest import EchoArgs, World, text_of

pytestmark = pytest.mark.timeout(60)

TIMEOUT = 10.0
UNWIND = 0.3  # a cancelled tool's cleanup (well within the 1 s grace)
BLOCKED = 45.0  # longer than any wait of the test


class InjectedCrashError(RuntimeError):
    """Raised inside the agent actor on purpose."""


_BEFORE: set[str] = set()


@pytest.fixture(autouse=True)
def _children_of_earlier_tests() -> None:
    """Child actors some earlier test in this process left behind are not this test's."""
    _BEFORE.clear()
    _BEFORE.update(r.actor_urn for r in _all_child_actors())


def _all_child_actors() -> list[Any]:
    """The child actors pykka lists, and the streams running on inference workers."""
    refs = pykka.ActorRegistry.get_all()
    actors = [r for r in refs if r.actor_class.__module__ == "agentkeep.actors.children"]
    return [*actors, *running_streams()]


def child_actors() -> list[Any]:
    """The per-call child actors (streams, tool calls, compactions) of this test that pykka
    still lists."""
    return [r for r in _all_child_actors() if r.actor_urn not in _BEFORE]


def no_child_actors_within(seconds: float) -> bool:
    """Wait (bounded) until pykka lists no child actor: for children of a live agent, which
    stop on their own once they reported."""
    deadline = time.monotonic() + seconds
    while child_actors():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def answer_last(context: Context) -> script.ScriptedResponse:
    return script.text(f"answer {text_of(context.messages[-1])}")


class Worker:
    """A durable tool whose first run works until cancelled, then cleans up for ``UNWIND``;
    later runs return at once. Counts how many runs are active at the same time."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.lock = threading.Lock()
        self.runs = 0
        self.active = 0
        self.most_active = 0
        self.first_cancelled = False

    def tool(self) -> ak.Tool[Any, Any]:
        @ak.tool(durable=True)
        def work(ctx: ak.ToolContext, args: EchoArgs) -> str:
            """Work until cancelled (first run only)."""
            with self.lock:
                self.runs += 1
                first = self.runs == 1
                self.active += 1
                self.most_active = max(self.most_active, self.active)
            try:
                if not first:
                    return "done at once"
                self.entered.set()
                self.first_cancelled = ctx.cancel.wait_cancelled(BLOCKED)
                time.sleep(UNWIND)  # its cleanup
                return "stopped"
            finally:
                with self.lock:
                    self.active -= 1

        return work


def crash_on_next_work(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Arm with ``.set()``: the agent actor then crashes on the next accepted message."""
    armed = threading.Event()
    feed = AgentActor._feed

    def crashing(self: AgentActor, first: Event) -> None:
        if armed.is_set() and isinstance(first, WorkAccepted):
            armed.clear()
            raise InjectedCrashError("the agent actor crashed while its children ran")
        feed(self, first)

    monkeypatch.setattr(AgentActor, "_feed", crashing)
    return armed


@pytest.mark.parametrize("how", ["delete", "close", "passivation"])
def test_a_stopping_agent_stops_its_running_tool_and_stream_first(world: World, how: str) -> None:
    worker = Worker()
    world.model.add(script.tool_call("work", {}), script.hang())
    system = world.open(tools=[worker.tool()], idle_grace_seconds=0.0)
    tooling, streaming = system.create(id="tooling"), system.create(id="streaming")
    tooling.send(ak.user("go"))
    assert worker.entered.wait(TIMEOUT)
    streaming.send(ak.user("go"))
    assert world.model.wait_for_requests(2, timeout_seconds=TIMEOUT)
    assert len(child_actors()) == 2

    if how == "delete":
        for agent in (tooling, streaming):  # each waits that long, then stops the actor
            system.delete(agent.id, timeout_seconds=0.1)
    elif how == "close":
        system.close(timeout_seconds=0.1)
    else:
        for agent in (tooling, streaming):
            agent.abort()  # the run settles at once; the actor passivates right after
            assert system.internals.wait_for_passivation(agent.id, timeout_seconds=TIMEOUT)

    assert child_actors() == []  # stopped with (before) their agents, not after
    assert worker.first_cancelled
    assert worker.active == 0


def test_a_crashed_agent_stops_its_running_tool_before_it_is_restarted(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = Worker()
    crash = crash_on_next_work(monkeypatch)
    world.model.add(script.tool_call("work", {}), answer_last)
    system = world.open(tools=[worker.tool()], restart_backoff=Backoff(initial_seconds=0))
    agent = system.create()
    agent.send(ak.user("go"))
    assert worker.entered.wait(TIMEOUT)

    crash.set()
    agent.steer(ak.user("crash now"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert not crash.is_set()  # it did crash
    assert worker.first_cancelled
    # The restarted agent resumed the durable call: a second run, never beside the first.
    assert (worker.runs, worker.most_active) == (2, 1)
    assert [text_of(m) for m in agent.transcript()][:3] == ["go", "", "done at once"]
    assert system.failure is None
    assert no_child_actors_within(TIMEOUT)


def test_a_crashed_agent_stops_its_running_stream_before_it_is_restarted(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    crash = crash_on_next_work(monkeypatch)
    world.model.add(script.hang(), answer_last)
    system = world.open(restart_backoff=Backoff(initial_seconds=0))
    agent = system.create()
    agent.send(ak.user("go"))
    assert world.model.wait_for_requests(1, timeout_seconds=TIMEOUT)

    crash.set()
    agent.steer(ak.user("crash now"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert not crash.is_set()
    assert [text_of(m) for m in agent.transcript()][-1] == "answer crash now"
    # The crashed incarnation cancelled its stream and closed its session after it.
    first_session = world.model.requests[0].agent_id
    assert first_session in world.model.closed_model_sessions
    assert no_child_actors_within(TIMEOUT)
    assert system.failure is None


class ProviderBugError(BaseException):
    """Not an Exception: what a broken library might raise (like ``SystemExit``)."""


def test_a_stream_that_raises_a_base_exception_fails_its_response_not_the_runtime(
    world: World,
) -> None:
    # The failed response leaves a note, answered when the agent next runs; then q2.
    world.model.add(script.raises(ProviderBugError("the provider broke")), answer_last, answer_last)
    system = world.open()
    agent = system.create()
    agent.send(ak.user("q1"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    note = "The last turn failed: The provider failed: the provider broke"
    assert [text_of(m) for m in agent.transcript()] == ["q1", note]

    agent.send(ak.user("q2"))  # the agent, its writer and its supervisors all live on
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    assert [text_of(m) for m in agent.transcript()][2:] == [f"answer {note}", "q2", "answer q2"]
    assert system.failure is None


def test_a_tool_child_that_dies_without_its_result_is_answered_for(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = ToolCallActor._work

    def broken(self: ToolCallActor) -> None:
        if self._call_id == "broken":
            raise RuntimeError("the child broke before it reported")
        work(self)

    monkeypatch.setattr(ToolCallActor, "_work", broken)
    world.model.add(
        script.tool_calls(
            script.call("echo", {"text": "a"}, call_id="broken"),
            script.call("echo", {"text": "b"}, call_id="fine"),
        ),
        answer_last,
    )
    system = world.open()
    agent = system.create()
    agent.send(ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    texts = [text_of(m) for m in agent.transcript()]
    assert texts[2:4] == [
        "The tool call failed: the child broke before it reported",
        "echo b",
    ]
    assert texts[-1] == "answer echo b"
    assert no_child_actors_within(TIMEOUT)


def test_a_call_run_again_never_takes_the_result_of_its_cancelled_earlier_run(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit whose outcome is unknown makes the agent go on from the store: the running
    call is cancelled and, durable, run again under the same id. The cancelled run's result
    must not be taken for the new run's (reports carry the child's identity).

    The fast call answers only once the slow call's first run is inside the tool: a run
    cancelled before it starts is never started (``ToolRunner._execute``), so were the fast
    result's commit to land first, there would be no earlier run to confuse with."""
    first_entered = threading.Event()
    second_entered = threading.Event()
    runs: list[int] = []

    @ak.tool
    def fast(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Answers once the slow call's first run has begun."""
        assert first_entered.wait(TIMEOUT)
        return f"fast {args.text}"

    @ak.tool(durable=True)
    def slow(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """First run: work until cancelled, return once the second run has begun."""
        runs.append(len(runs) + 1)
        if len(runs) == 1:
            first_entered.set()
            assert ctx.cancel.wait_cancelled(BLOCKED)
            assert second_entered.wait(TIMEOUT)
            return "run 1, cancelled"
        second_entered.set()
        world.gate("second").wait()
        return "run 2"

    commit = AgentActor._commit
    unknown: list[Plan] = []

    def outcome_unknown_once(self: AgentActor, plan: Plan) -> Event:
        landed = commit(self, plan)
        fast = isinstance(plan, CommitToolResult) and plan.pending.call.call_id == "fast"
        if fast and not unknown and isinstance(landed, CommitLanded):
            unknown.append(plan)  # the data landed, the caller was told it may not have
            return CommitFailed(plan=plan, message="COMMIT outcome unknown", outcome_unknown=True)
        return landed

    monkeypatch.setattr(AgentActor, "_commit", outcome_unknown_once)
    world.model.add(
        script.tool_calls(
            script.call("fast", {"text": "a"}, call_id="fast"),
            script.call("slow", {}, call_id="slow"),
        ),
        script.text("done"),
    )
    system = world.open(tools=[*world.tools(), fast, slow])
    agent = system.create()
    agent.send(ak.user("go"))
    assert second_entered.wait(TIMEOUT)
    world.gate("second").release.set()
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert len(unknown) == 1
    assert runs == [1, 2]
    texts = [text_of(m) for m in agent.transcript()]
    assert texts == ["go", "", "fast a", "run 2", "done"]
