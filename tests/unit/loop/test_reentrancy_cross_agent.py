"""Re-entrancy across agents (the base runtime's crossAgentReentrancy; the
loop's consume, abort and shutdown rules, docs/architecture.md):
agent A's tool acting on agent B never waits for B's loop — only for B's
durable acceptance — so no pair of agents can deadlock on each other, and operations that
must wait for B (delete, close) wait for B's admitted work and nothing else. The module
timeout turns a deadlock into a failure.

Both agents share one scripted model, so responses are derived from each request's context
(``Responder``), never from request order.

spec item -> test (``test_`` prefix left off; a file name means an earlier test covers it)
- A's tool awaits send/steer to B
    -> a_tool_sends_and_steers_to_a_busy_agent_without_waiting_for_its_loop
- A's tool compacts B -> a_tool_compacts_a_busy_agent_without_waiting_for_it
- A<->B cycles, mutual sends, compaction (no deadlock)
    -> agents_sending_steering_and_compacting_each_other_at_once_never_deadlock; also
       test_reentrancy.py: agents_messaging_each_other_from_their_tools_never_deadlock
- close, delete (no deadlock)
    -> deleting_another_agent_from_a_tool_waits_for_its_admitted_work (delete; refs have no
       delete, so the tool uses the system it was built with) and
       a_system_close_from_one_agents_tool_waits_for_the_other_agents_admitted_work (close:
       agentkeep has no per-agent close, so the system's close stands in for it)
- aborting B doesn't wait for B's blocked stream
    -> aborting_another_agent_does_not_wait_for_its_blocked_stream
- close/delete of B complete only after B's admitted work settles
    -> deleting_another_agent_from_a_tool_waits_for_its_admitted_work,
       a_system_close_from_one_agents_tool_waits_for_the_other_agents_admitted_work
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.types import Context

from .conftest import EchoArgs, World, text_of

pytestmark = pytest.mark.timeout(30)

TIMEOUT = 10.0

Reply = Callable[[], script.ScriptedResponse]


class Responder:
    """Answers a request from its last message: a user message named in ``replies`` gets that
    reply; anything else gets the text 'answer <last text>'."""

    def __init__(self, replies: dict[str, Reply]) -> None:
        self.replies = replies

    def __call__(self, context: Context) -> script.ScriptedResponse:
        last = context.messages[-1]
        text = text_of(last)
        if isinstance(last, ak.UserMessage) and text in self.replies:
            return self.replies[text]()
        return script.text(f"answer {text}")


def script_model(world: World, replies: dict[str, Reply], count: int = 12) -> None:
    world.model.add(*[Responder(replies) for _ in range(count)])


def texts(messages: list[ak.Message]) -> list[str]:
    return [text_of(m) for m in messages]


def call(name: str, **arguments: Any) -> Reply:
    return lambda: script.tool_call(name, arguments)


def summary_of_first(context: Context) -> Any:
    return script.compacted(ak.user(f"summary of {text_of(context.messages[0])}"))


def test_a_tool_sends_and_steers_to_a_busy_agent_without_waiting_for_its_loop(
    world: World,
) -> None:
    ids: dict[str, str] = {}

    @ak.tool
    def tell(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Steer and send to agent B; return once both are durably queued."""
        b = ctx.system.resolve(ids["b"])
        steered, sent = b.steer(ak.user("steer from A")), b.send(ak.user("send from A"))
        return f"told B {steered.created} {sent.created}"

    script_model(world, {"a task": call("tell"), "b task": call("wait", text="b")})
    system = world.open(tools=[tell, *world.tools()])
    a, b = system.create(), system.create()
    ids.update(a=a.id, b=b.id)
    b.send(ak.user("b task"))
    assert world.gate("b").entered.wait(TIMEOUT)  # B's loop waits for its own tool
    a.send(ak.user("a task"))

    assert a.wait_for_idle(timeout_seconds=TIMEOUT)  # A never waited for B's loop
    assert texts(a.transcript()) == ["a task", "", "told B True True", "answer told B True True"]
    world.gate("b").release.set()
    assert b.wait_for_idle(timeout_seconds=TIMEOUT)

    # B takes them as it would from anyone: the steer joins its tool results, the send after.
    assert texts(b.transcript()) == [
        "b task",
        "",
        "waited b",
        "steer from A",
        "answer steer from A",
        "send from A",
        "answer send from A",
    ]


def test_a_tool_compacts_a_busy_agent_without_waiting_for_it(world: World) -> None:
    ids: dict[str, str] = {}

    @ak.tool
    def squeeze(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Ask for a compaction of agent B."""
        ctx.system.compact(ids["b"])
        return "asked B to compact"

    script_model(world, {"a task": call("squeeze"), "b task": call("wait", text="b")})
    world.model.add_compactions(summary_of_first)
    system = world.open(tools=[squeeze, *world.tools()])
    a, b = system.create(), system.create()
    ids.update(a=a.id, b=b.id)
    b.send(ak.user("b task"))
    assert world.gate("b").entered.wait(TIMEOUT)
    a.send(ak.user("a task"))

    assert a.wait_for_idle(timeout_seconds=TIMEOUT)
    assert texts(a.transcript())[-1] == "answer asked B to compact"
    assert world.model.compactions == ()  # B's compaction waits for B's safe boundary
    world.gate("b").release.set()
    assert b.wait_for_idle(timeout_seconds=TIMEOUT)

    assert texts(b.transcript()) == ["summary of b task", "answer summary of b task"]
    assert len(world.model.compactions) == 1
    assert texts(a.transcript())[0] == "a task"  # only B was compacted


def test_agents_sending_steering_and_compacting_each_other_at_once_never_deadlock(
    world: World,
) -> None:
    ids: dict[str, str] = {}
    together = threading.Barrier(2, timeout=TIMEOUT)
    all_asked = threading.Barrier(2, timeout=TIMEOUT)

    @ak.tool
    def cross(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Meet the other agent's tool, then act on that agent while it acts on ours."""
        me = "a" if ctx.agent_id == ids["a"] else "b"
        other = ctx.system.resolve(ids["b" if me == "a" else "a"])
        together.wait()
        other.steer(ak.user(f"steer from {me}"))
        other.send(ak.user(f"hello from {me}"))
        other.compact()
        all_asked.wait()  # every request is made before either batch can end
        return f"{me} crossed"

    script_model(world, {"start a": call("cross"), "start b": call("cross")}, count=16)
    world.model.add_compactions(summary_of_first, summary_of_first)
    system = world.open(tools=[cross])
    a, b = system.create(), system.create()
    ids.update(a=a.id, b=b.id)
    a.send(ak.user("start a"))
    b.send(ak.user("start b"))

    for _ in range(2):  # each may wake the other again: wait until both rest
        assert a.wait_for_idle(timeout_seconds=TIMEOUT)
        assert b.wait_for_idle(timeout_seconds=TIMEOUT)
    for agent, me, other in ((a, "a", "b"), (b, "b", "a")):
        # Compaction first (at the boundary right after the batch), then steering, then send.
        assert texts(agent.transcript()) == [
            f"summary of start {me}",
            f"steer from {other}",
            f"answer steer from {other}",
            f"hello from {other}",
            f"answer hello from {other}",
        ]
    assert len(world.model.compactions) == 2


def test_aborting_another_agent_does_not_wait_for_its_blocked_stream(world: World) -> None:
    ids: dict[str, str] = {}
    streaming, let_go = threading.Event(), threading.Event()

    def stubborn() -> script.ScriptedResponse:
        streaming.set()
        assert let_go.wait(TIMEOUT)  # ignores cancellation: only the test ends it
        return script.text("too late")

    @ak.tool
    def stop_b(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Abort agent B's turn."""
        ctx.system.abort(ids["b"])
        return "aborted B"

    script_model(world, {"a task": call("stop_b"), "b task": stubborn})
    system = world.open(tools=[stop_b])
    a, b = system.create(), system.create()
    ids.update(a=a.id, b=b.id)
    b.send(ak.user("b task"))
    assert streaming.wait(TIMEOUT)
    a.send(ak.user("a task"))

    assert a.wait_for_idle(timeout_seconds=TIMEOUT)
    assert b.wait_for_idle(timeout_seconds=TIMEOUT)  # B's turn ended; its stream still hangs
    assert texts(a.transcript())[-1] == "answer aborted B"
    assert texts(b.transcript()) == ["b task"]
    let_go.set()  # the stream ends late; nothing of it lands


def test_deleting_another_agent_from_a_tool_waits_for_its_admitted_work(world: World) -> None:
    ids: dict[str, str] = {}
    box: list[ak.AgentSystem] = []
    deleting = threading.Event()

    @ak.tool
    def remove_b(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Delete agent B (refs have no delete: use the system this tool was built with)."""
        deleting.set()
        box[0].delete(ids["b"], timeout_seconds=TIMEOUT)
        return "deleted B"

    script_model(world, {"a task": call("remove_b"), "b task": call("wait", text="b")})
    system = world.open(tools=[remove_b, *world.tools()])
    box.append(system)
    a, b = system.create(), system.create()
    ids.update(a=a.id, b=b.id)
    b.send(ak.user("b task"))
    assert world.gate("b").entered.wait(TIMEOUT)
    b.send(ak.user("b later"))  # admitted before the delete: it must be answered first
    a.send(ak.user("a task"))
    assert deleting.wait(TIMEOUT)
    world.gate("b").release.set()

    assert a.wait_for_idle(timeout_seconds=TIMEOUT)
    assert texts(a.transcript())[-2:] == ["deleted B", "answer deleted B"]
    with pytest.raises(ak.UnknownAgentError):
        system.resolve(b.id)
    # What B was admitted to do was finished before the delete completed.
    assert texts(system.transcript(b.id)) == [
        "b task",
        "",
        "waited b",
        "answer waited b",
        "b later",
        "answer b later",
    ]
    assert system.internals.live_agents() == [a.id]


def test_a_system_close_from_one_agents_tool_waits_for_the_other_agents_admitted_work(
    world: World,
) -> None:
    box: list[ak.AgentSystem] = []
    refused: list[BaseException] = []

    @ak.tool
    def shut(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Close the system from inside agent A's loop."""
        try:
            box[0].close()
        except ak.AgentClosedError as error:
            refused.append(error)
        return "refused"

    script_model(world, {"a task": call("shut"), "b task": call("wait", text="b")})
    system = world.open(tools=[shut, *world.tools()])
    box.append(system)
    a, b = system.create(id="aaa"), system.create(id="bbb")
    b.send(ak.user("b task"))
    assert world.gate("b").entered.wait(TIMEOUT)
    b.send(ak.user("b later"))  # admitted before the close
    a.send(ak.user("a task"))
    assert a.wait_for_idle(timeout_seconds=TIMEOUT)

    assert len(refused) == 1
    assert not system.internals.store.closed  # the background close waits for B's admitted work
    with pytest.raises(ak.AgentClosedError):
        b.send(ak.user("too late"))
    world.gate("b").release.set()
    for closer in [t for t in threading.enumerate() if t.name == "agentkeep-close"]:
        closer.join(TIMEOUT)
        assert not closer.is_alive()

    assert system.internals.store.closed
    assert sorted(world.model.closed_model_sessions) == sorted(
        s.agent_id for s in world.model.model_sessions
    )
    reopened = world.open(resume=False)
    assert texts(reopened.transcript("aaa")) == ["a task", "", "refused", "answer refused"]
    assert texts(reopened.transcript("bbb")) == [
        "b task",
        "",
        "waited b",
        "answer waited b",
        "b later",
        "answer b later",
    ]
    for agent_id in ("aaa", "bbb"):
        assert reopened.internals.store.read(lambda tx, i=agent_id: tx.facts.read_owed(i)) is None


def test_a_waited_compact_of_an_agent_running_a_tool_from_another_loop_is_refused(
    world: World,
) -> None:
    # Seed 000: two agents each inside a tool are the one cross-agent case that cannot wait —
    # B's compaction waits for B's tool, which may be waiting for A.
    ids: dict[str, str] = {}
    outcome: list[BaseException | None] = []
    systems: list[ak.AgentSystem] = []

    @ak.tool
    def squeeze_and_wait(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Compact agent B and wait for it (a bounded wait: the old code would block)."""
        try:
            systems[0].compact(ids["b"], wait=True, timeout_seconds=3)
        except (ak.AwaitFromOwnLoopError, TimeoutError) as error:
            outcome.append(error)
            return "refused"
        outcome.append(None)
        return "compacted"

    script_model(world, {"a task": call("squeeze_and_wait"), "b task": call("wait", text="b")})
    system = world.open(tools=[squeeze_and_wait, *world.tools()])
    systems.append(system)
    a, b = system.create(), system.create()
    ids.update(a=a.id, b=b.id)
    b.send(ak.user("b task"))
    assert world.gate("b").entered.wait(TIMEOUT)  # B is inside its tool
    a.send(ak.user("a task"))
    assert a.wait_for_idle(timeout_seconds=TIMEOUT)

    (error,) = outcome
    assert isinstance(error, ak.AwaitFromOwnLoopError)
    assert f'compaction of agent "{b.id}", which is running a tool' in str(error)
    assert texts(a.transcript())[-1] == "answer refused"
    world.gate("b").release.set()
    assert b.wait_for_idle(timeout_seconds=TIMEOUT)
    assert world.model.compactions == ()  # refused outright: nothing was asked of B
    assert texts(b.transcript())[0] == "b task"
