"""Hook-generated send and steer actions carry ``send``/``steer``'s ``id`` and ``metadata``
("module-generated send and steer actions accept the same fields"), so an action a
hook returns again (after a crash, or on its next run) is an idempotent repeat."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

import agentkeep as ak
from agentkeep.providers import script

from .conftest import World, text_of


class FollowUp(ak.Feature):
    """After every loop, sends the same follow-up (same id) and records what was accepted."""

    name = "follow_up"

    def __init__(self) -> None:
        self.loops = 0
        self.accepted: list[ak.MessageAccepted] = []

    def after_agent_loop(self, ctx: ak.HookContext) -> Sequence[ak.SendAction]:
        self.loops += 1
        return (
            ak.SendAction(message=ak.user("follow up"), id="hookfollowup", metadata={"by": "hook"}),
        )

    def message_accepted(self, ctx: ak.HookContext, accepted: ak.MessageAccepted) -> None:
        self.accepted.append(accepted)


def test_a_repeated_send_action_id_makes_no_second_message_or_turn(world: World) -> None:
    feature = FollowUp()
    world.model.add(script.text("first answer"), script.text("follow-up answer"))
    system = world.open(features=[feature])
    agent = system.create()
    agent.send(ak.user("go"), id="usergo")
    assert agent.wait_for_idle(timeout_seconds=10)

    # The first after_agent_loop reopened the loop; the second returned the same id: a repeat.
    texts = [text_of(m) for m in agent.transcript()]
    assert texts == ["go", "first answer", "follow up", "follow-up answer"]
    assert feature.loops == 2
    assert agent.state == "idle"
    hook_message = [a for a in feature.accepted if a.id == "hookfollowup"]
    assert len(hook_message) == 1
    assert hook_message[0].metadata == {"by": "hook"}
    assert hook_message[0].kind == "send"


class SteerOnce(ak.Feature):
    """Every turn, steers the same note in (same id), as a hook re-run after a restart would."""

    name = "steer_once"

    def before_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> Sequence[ak.SteerAction]:
        return (ak.SteerAction(message=ak.user("house rules"), id="houserules"),)


def test_a_steer_action_id_stays_idempotent_across_a_restart(world: World) -> None:
    world.model.add(script.text("one"), script.text("two"), script.text("three"))
    system = world.open(features=[SteerOnce()])
    agent = system.create()
    agent.send(ak.user("first"))
    assert agent.wait_for_idle(timeout_seconds=10)
    # The steer outranks the queued send: the first turn answers both.
    assert [text_of(m) for m in agent.transcript()] == ["house rules", "one", "first", "two"]
    agent_id = agent.id
    system.close(timeout_seconds=10)

    reopened = world.open(features=[SteerOnce()])
    again = reopened.resolve(agent_id)
    again.send(ak.user("second"))
    assert again.wait_for_idle(timeout_seconds=10)

    texts = [text_of(m) for m in again.transcript()]
    assert texts.count("house rules") == 1
    assert texts[-2:] == ["second", "three"]


def test_an_action_id_is_checked_with_sends_rule_and_error(world: World) -> None:
    system = world.open()
    agent = system.create()
    with pytest.raises(ak.InvalidMessageError) as from_send:
        agent.send(ak.user("x"), id="Not-An-Id")
    for action in (ak.SendAction, ak.SteerAction):
        with pytest.raises(ak.InvalidMessageError) as from_action:
            action(message=ak.user("x"), id="Not-An-Id")
        assert str(from_action.value) == str(from_send.value)
    assert agent.transcript() == []


class Reopener(ak.Feature):
    """Records the loop brackets; its first after_agent_loop reopens the loop."""

    name = "reopener"

    def __init__(self) -> None:
        self.order: list[str] = []

    def before_agent_loop(self, ctx: ak.HookContext) -> None:
        self.order.append("before_agent_loop")

    def before_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> None:
        self.order.append("before_turn")

    def after_agent_loop(self, ctx: ak.HookContext) -> Sequence[ak.SendAction]:
        self.order.append("after_agent_loop")
        if self.order.count("after_agent_loop") > 1:
            return ()
        return (ak.SendAction(message=ak.user("one more thing")),)

    def after_agent_settled(self, ctx: ak.HookContext, error: str | None) -> None:
        self.order.append("settled")


def test_a_loop_reopened_by_after_agent_loop_fires_before_agent_loop_again(
    world: World,
) -> None:
    feature = Reopener()
    world.model.add(script.text("first"), script.text("reopened"))
    system = world.open(features=[feature])
    agent = system.create()
    agent.send(ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=10)

    assert [text_of(m) for m in agent.transcript()][-2:] == ["one more thing", "reopened"]
    loop = ["before_agent_loop", "before_turn", "after_agent_loop"]
    assert feature.order == [*loop, *loop, "settled"]
