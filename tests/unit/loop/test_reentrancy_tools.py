"""Re-entrancy from an agent's own tools (the base runtime's selfReentrantToolCalls and
toolBatchReentrancy).

A tool runs in its call's own thread while the agent's loop waits for the batch, so whatever
it asks of its own agent must not wait for that loop (send/steer return once durable,
compact/abort return once asked) or must be refused at once (``close``). The module timeout
turns a deadlock into a failure.

spec item -> test (``test_`` prefix left off; a file name means an earlier test covers it)
selfReentrantToolCalls
- tool self-send/steer/compact/abort settle exactly once
    -> a_tool_sending_and_steering_to_its_own_agent_lands_without_waiting_and_once (send,
       steer), a_tool_asking_for_its_own_compaction_does_not_wait_for_it (compact),
       a_tool_aborting_its_own_turn_ends_it_with_one_cancelled_event (abort); also
       test_reentrancy.py: a_tool_steering_compacting_and_sending_to_its_own_agent_settles_once
- awaited self-close rejects ("cannot finish"), unawaited drains after the tool
    -> a_system_close_from_a_tool_is_refused_and_drains_after_the_tool. Python mapping:
       agentkeep has no per-agent close (refs have none; an idle agent is passivated), so
       "close" is the system's; there is no un-awaited close, and the refused close going on
       in the background is the drain that waits for the tool.
- system close from a tool rejects but holds the lock until done
    -> a_system_close_from_a_tool_is_refused_and_drains_after_the_tool (also
       test_core_loop_gaps.py: a_re_entrant_close_from_a_tool_is_refused_and_the_system_…)
- detached tool store revoked before release
    -> a_detached_tool_store_is_revoked_before_the_store_is_released (agentkeep's close
       waits for a running tool up to its timeout, then abandons it: that tool is detached)
- manager resolve/send/compact work
    -> the_system_reference_handed_to_a_tool_resolves_sends_compacts_and_creates. Python
       mapping: the "manager" is the ``AgentSystemRef`` in ``ctx.system``. Its
       ``update_metadata`` of the tool's own agent succeeds: the seed refuses it
       because there it waits for the agent; here it is a store write that never does.
toolBatchReentrancy
- per-call KV isolation -> calls_of_one_batch_each_see_only_their_own_call_store
- compaction from tool/hook does not wait -> a_tool_asking_for_its_own_compaction_does_not_…
  (parametrized: from the tool, from its ``after_tool_call`` hook)
- tool can abort its own turn (last event cancelled)
    -> a_tool_aborting_its_own_turn_ends_it_with_one_cancelled_event
- sends from a tool land without waiting
    -> a_tool_sending_and_steering_to_its_own_agent_lands_without_waiting_and_once
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.types import Context, Done, StreamEvent

from .conftest import EchoArgs, World, text_of

pytestmark = pytest.mark.timeout(30)

TIMEOUT = 10.0
ABORTED = "The tool call was aborted."


def texts(messages: list[ak.Message]) -> list[str]:
    return [text_of(m) for m in messages]


def answer_last(context: Context) -> script.ScriptedResponse:
    """A response derived from the request (not from request order): 'answer <last text>'."""
    return script.text(f"answer {text_of(context.messages[-1])}")


class Events(ak.Feature):
    name = "events"

    def __init__(self) -> None:
        self.events: list[StreamEvent] = []

    def on_event(self, ctx: ak.HookContext, event: StreamEvent) -> None:
        self.events.append(event)


def test_a_tool_sending_and_steering_to_its_own_agent_lands_without_waiting_and_once(
    world: World,
) -> None:
    deliveries: list[ak.Delivery] = []
    notified = threading.Event()

    @ak.tool
    def notify(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Queue a steer and a send (twice, under one id) for this same agent."""
        me = ctx.system.resolve(ctx.agent_id)
        deliveries.append(me.send(ak.user("sent"), id="sent1"))
        deliveries.append(me.steer(ak.user("steered")))
        deliveries.append(me.send(ak.user("sent"), id="sent1"))  # idempotent repeat
        notified.set()
        return "queued"

    world.model.add(
        script.tool_calls(script.call("notify", {}), script.call("wait", {"text": "g"})),
        answer_last,
        answer_last,
    )
    system = world.open(tools=[notify, *world.tools()])
    agent = system.create()
    agent.send(ak.user("go"))
    assert world.gate("g").entered.wait(TIMEOUT)
    assert notified.wait(TIMEOUT)

    # notify returned while its batch is still running (its sibling holds the gate): the
    # messages are durably queued and the loop has consumed none of them yet.
    assert [d.created for d in deliveries] == [True, True, False]
    queued = system.internals.store.read(lambda tx: tx.queue.messages(agent.id))
    assert sorted((q.queue, text_of(q.message)) for q in queued) == [
        ("send", "sent"),
        ("steering", "steered"),
    ]
    consumed = texts(agent.transcript())
    assert "sent" not in consumed
    assert "steered" not in consumed
    world.gate("g").release.set()
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    # Steering joins the tool results; the send waits until nothing else is owed.
    assert texts(agent.transcript()) == [
        "go",
        "",
        "queued",
        "waited g",
        "steered",
        "answer steered",
        "sent",
        "answer sent",
    ]
    assert agent.state == "idle"


def test_a_tool_aborting_its_own_turn_ends_it_with_one_cancelled_event(world: World) -> None:
    @ak.tool
    def stop(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Abort the turn this call belongs to."""
        world.tool_runs.append("stop")
        ctx.system.abort(ctx.agent_id)
        return "asked"

    events = Events()
    world.model.add(script.tool_call("stop", {}), answer_last)
    system = world.open(tools=[stop], features=[events])
    agent = system.create()
    agent.send(ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    dones = [e.state for e in events.events if isinstance(e, Done)]
    assert dones == ["tool_call", "cancelled"]
    assert isinstance(events.events[-1], Done)  # the cancel is the turn's last event
    # The abort was asked before the tool returned: the call is answered "aborted", once.
    assert texts(agent.transcript()) == ["go", "", ABORTED]
    assert world.tool_runs == ["stop"]
    assert len(world.model.requests) == 1
    assert agent.state == "idle"

    agent.send(ak.user("again"))  # the agent is not wedged by its own abort
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    assert texts(agent.transcript())[-2:] == ["again", "answer again"]


class CompactAfterCall(ak.Feature):
    name = "compact-after-call"

    def __init__(self, returned: threading.Event) -> None:
        self.returned = returned

    def after_tool_call(self, ctx: ak.HookContext, call: Any, result: Any) -> None:
        ctx.system.compact(ctx.agent_id)
        self.returned.set()


@pytest.mark.parametrize("source", ["tool", "after_tool_call hook"])
def test_a_tool_asking_for_its_own_compaction_does_not_wait_for_it(
    world: World, source: str
) -> None:
    returned = threading.Event()
    seen: list[bool] = []

    @ak.tool
    def tidy(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Ask for a compaction of this agent."""
        if source == "tool":
            ctx.system.compact(ctx.agent_id)
            returned.set()
        return "asked"

    def compaction(context: Context) -> Any:
        seen.append(returned.is_set())
        return script.compacted(ak.user("summary"))

    features = [] if source == "tool" else [CompactAfterCall(returned)]
    world.model.add(script.tool_call("tidy", {}), answer_last)
    world.model.add_compactions(compaction)
    system = world.open(tools=[tidy], features=features)
    agent = system.create()
    agent.send(ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert seen == [True]  # asked and returned; the compaction ran after the batch
    # The compaction kept the continuation the tool result owed.
    assert texts(agent.transcript()) == ["summary", "answer summary"]
    assert len(world.model.compactions) == 1
    assert agent.state == "idle"


def test_calls_of_one_batch_each_see_only_their_own_call_store(world: World) -> None:
    both_wrote = threading.Barrier(2, timeout=TIMEOUT)
    kept: list[Any] = []

    @ak.tool
    def keep(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Write our text under one key, wait for the sibling to write, read it back."""
        assert ctx.kv.read("value") is None  # a fresh call starts with an empty store
        ctx.kv.write("value", args.text)
        kept.append(ctx.kv)
        both_wrote.wait()  # both calls run at once and have written the same key
        return f"{args.text} read {ctx.kv.read('value')}"

    world.model.add(
        script.tool_calls(
            script.call("keep", {"text": "one"}), script.call("keep", {"text": "two"})
        ),
        script.text("done"),
    )
    system = world.open(tools=[keep])
    agent = system.create()
    agent.send(ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert texts(agent.transcript())[2:4] == ["one read one", "two read two"]
    assert kept[0].prefix != kept[1].prefix
    for store in kept:  # each call's store ended with its call and was erased with its result
        with pytest.raises(ak.ExpiredScopeError):
            store.read("value")
    prefixes = [store.prefix for store in kept]
    leftovers = system.internals.store.read(lambda tx: [tx.kv.scan(p) for p in prefixes])
    assert leftovers == [[], []]


def test_a_system_close_from_a_tool_is_refused_and_drains_after_the_tool(world: World) -> None:
    box: list[ak.AgentSystem] = []
    refused: list[BaseException] = []

    @ak.tool
    def shut(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Close the system from inside this agent's loop, then keep working."""
        try:
            box[0].close()
        except ak.AgentClosedError as error:
            refused.append(error)
        world.gate("after-close").wait()
        return "still working"

    world.model.add(script.tool_call("shut", {}), script.text("finished"))
    system = world.open(tools=[shut])
    box.append(system)
    agent = system.create(id="closer")
    agent.send(ak.user("go"))
    assert world.gate("after-close").entered.wait(TIMEOUT)

    (error,) = refused
    assert "cannot finish" in str(error)
    # The close goes on in the background, but the store stays held (and the agent's turn
    # stays able to commit) until the tool is done: nothing new is admitted meanwhile.
    assert not system.internals.store.closed
    with pytest.raises(ak.StoreLockedError):
        world.open()
    with pytest.raises(ak.AgentClosedError):
        agent.send(ak.user("too late"))
    world.gate("after-close").release.set()
    for closer in [t for t in threading.enumerate() if t.name == "agentkeep-close"]:
        closer.join(TIMEOUT)
        assert not closer.is_alive()

    assert system.internals.store.closed
    (session,) = world.model.model_sessions
    assert world.model.closed_model_sessions == (session.agent_id,)
    reopened = world.open(resume=False)
    assert texts(reopened.transcript("closer")) == ["go", "", "still working", "finished"]
    assert reopened.internals.store.read(lambda tx: tx.facts.read_owed("closer")) is None


def test_a_detached_tool_store_is_revoked_before_the_store_is_released(world: World) -> None:
    late: list[BaseException] = []
    done = threading.Event()
    stores: list[Any] = []

    @ak.tool
    def linger(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Ignore cancellation; write to the call store once let go."""
        stores.append(ctx.kv)
        ctx.kv.write("early", "kept until the result")
        world.gate("linger").wait()
        try:
            ctx.kv.write("late", "must never land")
        except Exception as error:
            late.append(error)
        finally:
            done.set()
        return "too late"

    world.model.add(script.tool_call("linger", {}))
    first = world.open(tools=[linger])
    agent = first.create(id="detached")
    agent.send(ak.user("go"))
    assert world.gate("linger").entered.wait(TIMEOUT)

    first.close(timeout_seconds=0.2)  # waits that long for the tool, then abandons it
    second = world.open(resume=False)  # the lock was released: another owner holds it now
    world.gate("linger").release.set()
    assert done.wait(TIMEOUT)

    (error,) = late
    assert isinstance(error, ak.ExpiredScopeError | ak.StoreClosedError), error
    entries = second.internals.store.read(lambda tx: tx.kv.scan(stores[0].prefix))
    assert [value for _, value in entries] == ["kept until the result"]


def test_the_system_reference_handed_to_a_tool_resolves_sends_compacts_and_creates(
    world: World,
) -> None:
    seen: dict[str, Any] = {}

    @ak.tool
    def manage(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Use every operation of the reference on this agent and on a new child."""
        ref = ctx.system
        me = ref.resolve(ctx.agent_id)
        seen["me"] = (me.id, me.parent, me.metadata)
        seen["merged"] = me.update_metadata({"step": "managed"})  # a store write: no wait
        child = ref.create(ak.AgentConfig(metadata={"title": "child"}))
        seen["child"] = child.id
        seen["family"] = (ref.parent_of(child.id), ref.children_of(ctx.agent_id))
        ref.send(child.id, ak.user("child task"))
        ref.compact(ctx.agent_id)
        return "managed"

    world.model.add(script.tool_call("manage", {}), answer_last, answer_last)
    world.model.add_compactions(script.compacted(ak.user("summary")))
    system = world.open(tools=[manage])
    agent = system.create(ak.AgentConfig(metadata={"title": "parent"}))
    agent.send(ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    child_id = seen["child"]
    assert system.wait_for_idle(child_id, timeout_seconds=TIMEOUT)

    assert seen["me"] == (agent.id, None, {"title": "parent"})
    assert seen["merged"] == {"title": "parent", "step": "managed"}
    assert seen["family"] == (agent.id, [child_id])
    assert system.metadata(agent.id) == {"title": "parent", "step": "managed"}
    assert texts(system.transcript(child_id)) == ["child task", "answer child task"]
    assert texts(agent.transcript()) == ["summary", "answer summary"]
    assert len(world.model.compactions) == 1
