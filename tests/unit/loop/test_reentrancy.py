"""Re-entrancy (the base runtime's hookReentrancy, selfReentrantToolCalls, crossAgentReentrancy):
hooks and tools that act on their own agent or on another one never deadlock, and every
request they make is settled exactly once. Per-test timeouts turn a deadlock into a failure."""

from __future__ import annotations

from collections.abc import Sequence

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.types import Context, Done, StreamEvent, TextEnd

from .conftest import EchoArgs, World, roles, text_of


class SelfSender(ak.Feature):
    """Sends one message to its own agent from ``on_event``, the first time text ends."""

    name = "self-sender"

    def __init__(self) -> None:
        self.sent = False

    def on_event(self, ctx: ak.HookContext, event: StreamEvent) -> None:
        if isinstance(event, TextEnd) and not self.sent:
            self.sent = True
            ctx.system.resolve(ctx.agent_id).send(ak.user("from the hook"))


def test_a_self_send_from_on_event_is_answered_once_without_a_ghost_turn(world: World) -> None:
    world.model.add(script.text("first"), script.text("second"))
    system = world.open(features=[SelfSender()])
    agent = system.create()
    agent.send(ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=10)

    assert [text_of(m) for m in agent.transcript()] == ["go", "first", "from the hook", "second"]
    assert len(world.model.requests) == 2


class Aborter(ak.Feature):
    name = "aborter"

    def __init__(self) -> None:
        self.dones: list[Done] = []

    def on_event(self, ctx: ak.HookContext, event: StreamEvent) -> None:
        if isinstance(event, Done):
            self.dones.append(event)
        elif isinstance(event, TextEnd):
            ctx.system.abort(ctx.agent_id)  # the hook aborts its own turn: a request only


def test_a_hook_aborting_its_own_turn_yields_exactly_one_terminal_event(world: World) -> None:
    aborter = Aborter()
    world.model.add(script.text("partial", chunks=3))
    system = world.open(features=[aborter])
    agent = system.create()
    agent.send(ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=10)

    # The abort is a request behind whatever the stream already delivered: the response ends
    # either way, but with exactly one terminal event (invariant I9).
    assert len(aborter.dones) == 1
    assert aborter.dones[0].state in ("cancelled", "normal")


def test_a_tool_steering_compacting_and_sending_to_its_own_agent_settles_once(
    world: World,
) -> None:
    @ak.tool
    def busy(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Act on our own agent in every way a tool may."""
        me = ctx.system.resolve(ctx.agent_id)
        me.steer(ak.user("steered"))
        me.send(ak.user("sent"))
        me.compact()
        return "asked"

    world.model.add(script.tool_call("busy", {}), script.text("a1"), script.text("a2"))
    world.model.add_compactions(script.compacted(ak.user("summary")))
    system = world.open(tools=[busy])
    agent = system.create()
    agent.send(ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=15)

    texts = [text_of(m) for m in agent.transcript()]
    assert texts[0] == "summary"  # the compaction ran at the safe boundary after the batch
    assert texts.count("steered") + texts.count("sent") <= 2
    assert texts[-1] == "a2"
    assert agent.state == "idle"
    assert len(world.model.compactions) == 1


def test_agents_messaging_each_other_from_their_tools_never_deadlock(world: World) -> None:
    ids: dict[str, str] = {}

    @ak.tool
    def tell_other(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Send a message to the other agent and return once it is durably accepted."""
        other = ids["b"] if ctx.agent_id == ids["a"] else ids["a"]
        delivery = ctx.system.resolve(other).send(ak.user(f"hello from {ctx.agent_id}"))
        return f"delivered {delivery.created}"

    def respond(context: Context) -> script.ScriptedResponse:
        # Derived from the conversation, not from request order (two agents share the model):
        # a "start" message calls the tool; anything else gets a text answer.
        last = context.messages[-1]
        if isinstance(last, ak.UserMessage) and text_of(last).startswith("start"):
            return script.tool_call("tell_other", {})
        return script.text("done")

    world.model.add(*[respond for _ in range(8)])
    system = world.open(tools=[tell_other])
    a, b = system.create(), system.create()
    ids.update(a=a.id, b=b.id)
    a.send(ak.user("start a"))
    b.send(ak.user("start b"))

    assert a.wait_for_idle(timeout_seconds=20)
    assert b.wait_for_idle(timeout_seconds=20)
    assert a.wait_for_idle(timeout_seconds=20)
    for agent, other in ((a, b), (b, a)):
        texts = [text_of(m) for m in agent.transcript()]
        assert texts.count(f"hello from {other.id}") == 1
        assert roles(agent.transcript())[-1] == "assistant"


class ChildSpawner(ak.Feature):
    """After its first turn, a parent agent hands a task to a new child agent."""

    name = "spawner"

    def __init__(self) -> None:
        self.children: list[str] = []

    def after_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> Sequence[ak.SendAction]:
        if not self.children and ctx.agent_id not in self.children:
            child = ctx.system.create()
            self.children.append(child.id)
            child.send(ak.user("child task"))
        return ()


def test_a_hook_creating_and_tasking_a_child_agent_does_not_wait_for_it(world: World) -> None:
    spawner = ChildSpawner()
    world.model.add(script.text("parent answer"), script.text("child answer"))
    system = world.open(features=[spawner])
    parent = system.create()
    parent.send(ak.user("go"))
    assert parent.wait_for_idle(timeout_seconds=10)
    (child_id,) = spawner.children
    assert system.wait_for_idle(child_id, timeout_seconds=10)

    assert system.parent_of(child_id) == parent.id
    assert [text_of(m) for m in system.transcript(child_id)] == ["child task", "child answer"]
