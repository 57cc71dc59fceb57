"""``message_accepted_transact`` / ``message_accepted``: every queued
message entering the conversation is reported inside the consuming transaction, then after it
committed — as it was queued, tool request block and metadata included."""

from __future__ import annotations

import threading

import pytest

import agentkeep as ak
from agentkeep.providers import script

from .conftest import World, roles, text_of


class Journal(ak.Feature):
    name = "journal"

    def __init__(self, *, fail_on: str | None = None) -> None:
        self.fail_on = fail_on
        self.transacted: list[ak.MessageAccepted] = []
        self.observed: list[ak.MessageAccepted] = []
        self.durable_when_observed: list[bool] = []

    def message_accepted_transact(self, ctx: ak.HookContext, accepted: ak.MessageAccepted) -> None:
        if accepted.id == self.fail_on:
            raise RuntimeError("the journal refuses this one")
        self.transacted.append(accepted)
        ctx.kv.write(f"seen.{accepted.id}", accepted.kind)  # joins the consumption

    def message_accepted(self, ctx: ak.HookContext, accepted: ak.MessageAccepted) -> None:
        self.observed.append(accepted)
        self.durable_when_observed.append(ctx.kv.read(f"seen.{accepted.id}") == accepted.kind)


def test_each_consumed_message_is_reported_in_its_transaction_then_after_commit(
    world: World,
) -> None:
    journal = Journal()
    world.model.add(script.text("one"), script.text("two"))
    system = world.open(features=[journal])
    agent = system.create()
    agent.send(ak.user("first"), id="m1", metadata={"origin": "test"})
    assert agent.wait_for_idle(timeout_seconds=20)
    agent.steer(ak.user("second"), id="m2")
    assert agent.wait_for_idle(timeout_seconds=20)

    assert [(a.id, a.kind) for a in journal.transacted] == [("m1", "send"), ("m2", "steering")]
    assert [a.id for a in journal.observed] == ["m1", "m2"]
    assert journal.durable_when_observed == [True, True]  # observed only after the commit
    assert journal.observed[0].metadata == {"origin": "test"}
    assert text_of(journal.observed[0].message) == "first"


def test_the_hooks_see_a_tool_request_block_as_it_was_queued(world: World) -> None:
    journal = Journal()
    world.model.add(script.text("done"))
    system = world.open(features=[journal])
    agent = system.create()
    agent.send(ak.user(["/echo ", ak.tool_request("echo", {"text": "hi"})]), id="req")
    assert agent.wait_for_idle(timeout_seconds=20)

    blocks = journal.transacted[0].message.content
    assert isinstance(blocks[-1], ak.ToolCallRequestBlock)
    assert blocks[-1].name == "echo"
    assert world.tool_runs == ["echo:hi"]


def test_a_failing_transactional_hook_rolls_the_consumption_back(world: World) -> None:
    journal = Journal(fail_on="bad")
    world.model.add(script.text("never"))
    system = world.open(features=[journal])
    agent = system.create()
    agent.send(ak.user("refused by the journal"), id="bad")
    assert agent.wait_for_idle(timeout_seconds=20)

    # Nothing of the consumption landed: the message is still queued, nothing observed;
    # the turn failed (its note is the only record) and stays owed.
    assert roles(agent.transcript()) == ["system"]
    assert system.internals.store.read(lambda tx: [q.id for q in tx.queue.messages(agent.id)]) == [
        "bad"
    ]
    assert journal.observed == []
    assert agent.state == "owes_work"


def test_a_failing_observer_is_isolated(world: World) -> None:
    class Broken(ak.Feature):
        name = "broken"

        def message_accepted(self, ctx: ak.HookContext, accepted: ak.MessageAccepted) -> None:
            raise RuntimeError("observer broke")

    journal = Journal()
    world.model.add(script.text("fine"))
    system = world.open(features=[Broken(), journal])
    agent = system.create()
    agent.send(ak.user("hello"), id="m1")
    assert agent.wait_for_idle(timeout_seconds=20)

    assert text_of(agent.transcript()[-1]) == "fine"
    assert [a.id for a in journal.observed] == ["m1"]


def test_a_send_from_the_transactional_hook_lands_only_with_the_consumption(
    world: World,
) -> None:
    forwarded = threading.Event()

    class Forwarder(ak.Feature):
        name = "forwarder"

        def __init__(self) -> None:
            self.target = ""

        def message_accepted_transact(
            self, ctx: ak.HookContext, accepted: ak.MessageAccepted
        ) -> None:
            if accepted.id == "m1":
                ctx.system.send(self.target, ak.user("copy of m1"), id="copy1")
                forwarded.set()

    forwarder = Forwarder()
    world.model.add(script.text("a"), script.text("b"))
    system = world.open(features=[forwarder])
    other = system.create()
    forwarder.target = other.id
    agent = system.create()
    agent.send(ak.user("original"), id="m1")
    assert agent.wait_for_idle(timeout_seconds=20)
    assert forwarded.is_set()
    assert other.wait_for_idle(timeout_seconds=20)

    assert text_of(other.transcript()[0]) == "copy of m1"


@pytest.mark.parametrize("queue", ["send", "steering"])
def test_the_kind_names_the_queue(world: World, queue: str) -> None:
    journal = Journal()
    world.model.add(script.text("ok"))
    system = world.open(features=[journal])
    agent = system.create()
    (agent.steer if queue == "steering" else agent.send)(ak.user("x"), id="q1")
    assert agent.wait_for_idle(timeout_seconds=20)
    assert [a.kind for a in journal.observed] == [queue]
