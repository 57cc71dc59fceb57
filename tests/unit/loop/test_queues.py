"""Queues and delivery (seed README: the two queues, the four strategies, settings)."""

from __future__ import annotations

import pytest

import agentkeep as ak
from agentkeep.providers import script

from .conftest import World, roles, text_of


def test_a_sent_message_is_answered_and_the_agent_settles(world: World) -> None:
    world.model.add(script.text("hello there"))
    system = world.open()
    agent = system.create()

    delivery = agent.send(ak.user("hi"))

    assert delivery.delivery == "send"
    assert delivery.created
    assert agent.wait_for_idle(timeout_seconds=10)
    transcript = agent.transcript()
    assert roles(transcript) == ["user", "assistant"]
    assert text_of(transcript[1]) == "hello there"
    assert agent.state == "idle"
    assert system.internals.store.read(lambda tx: tx.facts.read_owed(agent.id)) is None


def test_a_repeated_message_id_is_accepted_once(world: World) -> None:
    world.model.add(script.text("once"))
    system = world.open()
    agent = system.create()

    first = agent.send(ak.user("hi"), id="msgone")
    second = agent.send(ak.user("hi again"), id="msgone")
    agent.wait_for_idle(timeout_seconds=10)

    assert (first.created, second.created) == (True, False)
    assert [text_of(m) for m in agent.transcript()] == ["hi", "once"]
    assert len(world.model.requests) == 1


def test_steering_joins_the_tool_results_and_outranks_an_earlier_send(world: World) -> None:
    world.model.add(
        script.tool_call("wait", {"text": "g"}),
        script.text("after steering"),
        script.text("after send"),
    )
    system = world.open()
    agent = system.create()
    agent.send(ak.user("start"))
    assert world.gate("g").entered.wait(10)

    agent.send(ak.user("queued send"))
    agent.steer(ak.user("steer now"))
    world.gate("g").release.set()
    agent.wait_for_idle(timeout_seconds=10)

    second, third = world.model.requests[1], world.model.requests[2]
    assert roles(list(second.context.messages)) == ["user", "assistant", "tool", "user"]
    assert text_of(second.context.messages[-1]) == "steer now"
    assert text_of(third.context.messages[-1]) == "queued send"
    assert text_of(agent.transcript()[-1]) == "after send"


def test_steering_one_at_a_time_answers_each_message_separately(world: World) -> None:
    world.model.add(
        script.tool_call("wait", {"text": "g"}),
        script.text("a1"),
        script.text("a2"),
    )
    system = world.open(steering_mode="one-at-a-time")
    agent = system.create()
    agent.send(ak.user("start"))
    assert world.gate("g").entered.wait(10)
    agent.steer(ak.user("first"))
    agent.steer(ak.user("second"))
    world.gate("g").release.set()
    agent.wait_for_idle(timeout_seconds=10)

    assert len(world.model.requests) == 3
    assert text_of(world.model.requests[1].context.messages[-1]) == "first"
    assert text_of(world.model.requests[2].context.messages[-1]) == "second"


def test_steering_all_injects_every_waiting_message_before_one_response(world: World) -> None:
    world.model.add(script.tool_call("wait", {"text": "g"}), script.text("both"))
    system = world.open(steering_mode="all")
    agent = system.create()
    agent.send(ak.user("start"))
    assert world.gate("g").entered.wait(10)
    agent.steer(ak.user("first"))
    agent.steer(ak.user("second"))
    world.gate("g").release.set()
    agent.wait_for_idle(timeout_seconds=10)

    assert len(world.model.requests) == 2
    tail = world.model.requests[1].context.messages[-2:]
    assert [text_of(m) for m in tail] == ["first", "second"]


def test_send_all_injects_every_waiting_message_once_the_agent_would_stop(world: World) -> None:
    world.model.add(script.tool_call("wait", {"text": "g"}), script.text("a"), script.text("b"))
    system = world.open(send_mode="all")
    agent = system.create()
    agent.send(ak.user("start"))
    assert world.gate("g").entered.wait(10)
    agent.send(ak.user("one"))
    agent.send(ak.user("two"))
    world.gate("g").release.set()
    agent.wait_for_idle(timeout_seconds=10)

    # The tool result is answered first (send waits until nothing is owed), then both sends
    # join one response.
    assert len(world.model.requests) == 3
    assert roles(list(world.model.requests[1].context.messages))[-1] == "tool"
    assert [text_of(m) for m in world.model.requests[2].context.messages[-2:]] == ["one", "two"]


def test_a_send_accepted_mid_inference_gets_one_more_request_in_the_same_turn(
    world: World,
) -> None:
    world.model.add(script.tool_call("wait", {"text": "g"}), script.text("a"), script.text("b"))
    system = world.open()
    agent = system.create()
    agent.send(ak.user("first"))
    assert world.gate("g").entered.wait(10)
    agent.send(ak.user("second"))
    world.gate("g").release.set()
    agent.wait_for_idle(timeout_seconds=10)

    assert len(world.model.requests) == 3
    assert [text_of(m) for m in agent.transcript() if text_of(m)][-1] == "b"


def test_message_settings_take_effect_when_consumed_and_stay(world: World) -> None:
    world.model = ak.ScriptedModel(models=("gym-1", "gym-2"))
    world.model.add(script.text("one"), script.text("two"))
    system = world.open()
    agent = system.create()

    agent.send(ak.user("a"), model="gym-2", effort="high")
    agent.wait_for_idle(timeout_seconds=10)
    agent.send(ak.user("b"))
    agent.wait_for_idle(timeout_seconds=10)

    selections = [r.selection for r in world.model.requests]
    assert [(s.model, s.effort) for s in selections] == [("gym-2", "high"), ("gym-2", "high")]
    assert agent.settings.model == "gym-2"


def test_bad_input_is_refused_with_a_clear_error_and_nothing_is_queued(world: World) -> None:
    system = world.open()
    agent = system.create()

    with pytest.raises(ak.InvalidMessageError, match="must not be empty"):
        agent.send(ak.user(""))
    with pytest.raises(ak.InvalidMessageError, match="at least one content block"):
        agent.send(ak.user([]))
    with pytest.raises(ak.InvalidMessageError, match="invalid"):
        agent.send(ak.user("x"), id="Not An Id")
    assert system.internals.store.read(lambda tx: tx.queue.messages(agent.id)) == []
    with pytest.raises(ak.UnknownAgentError, match="nosuchagent"):
        system.resolve("nosuchagent")
