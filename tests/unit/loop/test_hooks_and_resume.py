"""Hook failure rules and resuming from durable state ."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import pytest

import agentkeep as ak
from agentkeep.persistence.interface import Transaction
from agentkeep.providers import script
from agentkeep.types import StreamEvent, ToolCallBlock
from agentkeep.types.records import (
    BlockRecord,
    OwedWork,
    PendingToolCall,
    QueuedMessage,
    UserRecord,
)

from .conftest import EchoArgs, World, roles, text_of


class Broken(ak.Feature):
    name = "broken"

    def on_event(self, ctx: ak.HookContext, event: StreamEvent) -> None:
        raise RuntimeError("observer broke")

    def before_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> Sequence[ak.SteerAction]:
        raise RuntimeError("action hook broke")


class Counting(ak.Feature):
    name = "counting"

    def __init__(self) -> None:
        self.events = 0
        self.turns: list[str] = []

    def on_event(self, ctx: ak.HookContext, event: StreamEvent) -> None:
        self.events += 1

    def before_agent_loop(self, ctx: ak.HookContext) -> None:
        self.turns.append("loop")

    def before_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> None:
        self.turns.append("turn")

    def after_agent_settled(self, ctx: ak.HookContext, error: str | None) -> None:
        self.turns.append(f"settled:{error}")


def test_a_failing_observer_or_action_hook_never_silences_others_or_fails_the_run(
    world: World,
) -> None:
    counting = Counting()
    world.model.add(script.text("fine"))
    system = world.open(features=[Broken(), counting])
    agent = system.create()
    agent.send(ak.user("go"))
    agent.wait_for_idle(timeout_seconds=10)

    assert text_of(agent.transcript()[-1]) == "fine"
    assert counting.events >= 3
    assert counting.turns == ["loop", "turn", "settled:None"]


class LoudInstructions(ak.Feature):
    name = "loud"

    def instructions(self, ctx: ak.HookContext) -> str | None:
        raise RuntimeError("no instructions")


def test_a_failing_instructions_hook_fails_the_turn_loudly(world: World) -> None:
    system = world.open(features=[LoudInstructions()])
    agent = system.create()
    agent.send(ak.user("go"))
    agent.wait_for_idle(timeout_seconds=10)

    assert world.model.requests == ()
    assert text_of(agent.transcript()[-1]) == "The last turn failed: no instructions"


class Steerer(ak.Feature):
    name = "steerer"

    def __init__(self) -> None:
        self.done = False

    def after_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> Sequence[ak.SteerAction]:
        if self.done:
            return ()
        self.done = True
        return (ak.SteerAction(message=ak.user("and also")),)


def test_after_turn_actions_drive_another_turn(world: World) -> None:
    world.model.add(script.text("a1"), script.text("a2"))
    system = world.open(features=[Steerer()])
    agent = system.create()
    agent.send(ak.user("q1"))
    agent.wait_for_idle(timeout_seconds=10)

    assert [text_of(m) for m in agent.transcript()] == ["q1", "a1", "and also", "a2"]


def _seed(world: World, agent_id: str, write: Callable[[Transaction], None]) -> None:
    system = world.open()
    system.create(id=agent_id)
    system.internals.store.transact(write)
    system.close()


def test_start_answers_a_trailing_user_record_and_leftover_queue(world: World) -> None:
    def write(tx: Transaction) -> None:
        tx.records.append("agentx", UserRecord(message_id="m1", message=ak.user("left")))
        tx.queue.claim_message_id("agentx", "m2")
        tx.queue.enqueue("agentx", QueuedMessage(id="m2", queue="send", message=ak.user("queued")))
        tx.facts.write_owed("agentx", OwedWork(stage="inference"))

    _seed(world, "agentx", write)
    world.model.add(script.text("for left"), script.text("for queued"))
    system = world.open()  # open resumes agents that owe work
    system.wait_for_idle("agentx", timeout_seconds=10)

    assert [text_of(m) for m in system.transcript("agentx")] == [
        "left",
        "for left",
        "queued",
        "for queued",
    ]


def test_a_dispatched_batch_resumes_running_only_durable_tools(world: World) -> None:
    runs: list[str] = []

    @ak.tool(durable=True)
    def again(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Durable."""
        runs.append("again")
        return "ran again"

    @ak.tool
    def once(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Not durable."""
        runs.append("once")
        return "ran"

    calls = [
        ToolCallBlock(call_id="c1", name="again", arguments="{}"),
        ToolCallBlock(call_id="c2", name="once", arguments="{}"),
    ]

    def write(tx: Transaction) -> None:
        tx.records.append("agentx", UserRecord(message_id="m1", message=ak.user("go")))
        for call in calls:
            tx.records.append("agentx", BlockRecord(block=call))
        pending = [
            PendingToolCall(internal_id=f"i{n}", index=n, call=c) for n, c in enumerate(calls)
        ]
        tx.calls.put("agentx", pending)
        tx.facts.write_owed("agentx", OwedWork(stage="tools"))

    _seed(world, "agentx", write)
    world.model.add(script.text("after resume"))
    system = world.open(tools=[again, once])
    system.wait_for_idle("agentx", timeout_seconds=10)

    transcript = system.transcript("agentx")
    assert runs == ["again"]
    assert roles(transcript) == ["user", "assistant", "tool", "tool", "assistant"]
    assert (
        text_of(transcript[3]) == "The tool call was interrupted by a restart and was not retried."
    )
    assert system.internals.store.read(
        lambda tx: (tx.facts.read_owed("agentx"), tx.calls.pending("agentx"))
    ) == (
        None,
        [],
    )


def test_a_call_stranded_without_a_batch_entry_is_dispatched_fresh(world: World) -> None:
    def write(tx: Transaction) -> None:
        tx.records.append("agentx", UserRecord(message_id="m1", message=ak.user("go")))
        call = ToolCallBlock(call_id="c1", name="echo", arguments='{"text": "x"}')
        tx.records.append("agentx", BlockRecord(block=call))
        tx.facts.write_owed("agentx", OwedWork(stage="inference"))

    _seed(world, "agentx", write)
    world.model.add(script.text("answered"))
    system = world.open()
    system.wait_for_idle("agentx", timeout_seconds=10)

    assert world.tool_runs == ["echo:x"]
    assert [text_of(m) for m in system.transcript("agentx")][-2:] == ["echo x", "answered"]


def test_a_second_system_on_the_same_store_is_refused(world: World) -> None:
    world.open()
    with pytest.raises(ak.StoreLockedError, match=f"process {os.getpid()}"):
        world.open()
