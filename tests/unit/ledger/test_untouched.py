"""Compaction and model resets change what the provider sees, never the
ledger; the limits on an event's size refuse what a caller can shrink, before writing."""

from __future__ import annotations

import pytest

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.sessions import EventTooLargeError

from .conftest import LedgerWorld, all_events, types_of

CLAUDE = "anthropic/claude-x"


def test_compaction_appends_its_event_and_leaves_the_ledger_untouched(world: LedgerWorld) -> None:
    world.model.add(script.text("a1"), script.text("a2"))
    world.model.add_compactions(script.compacted(ak.user("summary")))
    system = world.open()
    agent = system.create()
    agent.send(ak.user("q1"))
    agent.wait_for_idle(timeout_seconds=10)
    before = all_events(system, agent.id)

    agent.compact(wait=True, timeout_seconds=10)
    agent.send(ak.user("q2"))
    agent.wait_for_idle(timeout_seconds=10)

    after = all_events(system, agent.id)
    assert after[: len(before)] == before  # nothing earlier changed or went
    compactions = [e for e in after[len(before) :] if e.type == "compaction"]
    assert len(compactions) == 1
    assert compactions[0].data["epoch"] == 1
    assert compactions[0].data["messages"][0]["content"] == [{"type": "text", "text": "summary"}]
    # The compacted-away exchange is still in the ledger, word for word.
    texts = [e.data["block"].get("text") for e in after if e.type == "assistant.block"]
    assert texts == ["a1", "a2"]


def test_a_model_reset_appends_its_event_and_leaves_the_ledger_untouched(
    world: LedgerWorld,
) -> None:
    claude = ak.ScriptedModel(models=(CLAUDE,))
    world.model.add(script.text("a1"))
    claude.add(script.text("a2"))
    providers = world.providers()
    providers.add("claude", claude, kind="claude")
    system = world.open(providers=providers)
    agent = system.create()
    agent.send(ak.user("q1"))
    agent.wait_for_idle(timeout_seconds=10)
    before = all_events(system, agent.id)

    agent.send(ak.user("q2"), provider="claude", model=CLAUDE)
    agent.wait_for_idle(timeout_seconds=10)

    after = all_events(system, agent.id)
    assert after[: len(before)] == before
    new = after[len(before) :]
    assert types_of(new)[:5] == [
        "turn.queued",
        "message.accepted",
        "turn.running",
        "model.switch",
        "message",
    ]
    switch = new[3].data
    assert new[3].turn_id == new[0].data["turn_id"]  # the switch belongs to the turn
    assert switch["reset"] is True
    assert switch["epoch"] == 1
    assert switch["previous"] == {"provider": "local", "model": "gym-1"}
    assert switch["current"] == {"provider": "claude", "model": CLAUDE}
    # The transcript restarted; the ledger kept the first exchange.
    assert len(agent.transcript()) == 2
    asked = [e for e in after if e.type == "message" and e.data["role"] == "user"]
    assert [e.data["message"]["parts"][0]["text"] for e in asked] == [
        "q1",
        "q2",
    ]


def test_a_message_too_big_for_its_event_is_refused_before_anything_is_written(
    world: LedgerWorld,
) -> None:
    system = world.open(max_event_bytes=1024)
    agent = system.create()
    with pytest.raises(EventTooLargeError, match=r"max_event_bytes \(1024\)") as raised:
        system.internals.accept(agent.id, "send", ak.user("x" * 2000), id="m1", start=False)
    assert raised.value.limit == 1024
    assert raised.value.size > 2000
    assert isinstance(raised.value, ak.InvalidMessageError)
    assert system.events(agent.id) == []
    assert system.state(agent.id) == "idle"  # nothing owed, nothing queued
    # Nothing was claimed either: the id is still free for a message that fits.
    delivery = system.internals.accept(agent.id, "send", ak.user("short"), id="m1", start=False)
    assert delivery.created
    assert types_of(system.events(agent.id)) == ["turn.queued", "message.accepted"]


def test_a_metadata_update_too_big_for_its_event_is_refused(world: LedgerWorld) -> None:
    system = world.open(max_event_bytes=1024)
    agent = system.create()
    with pytest.raises(EventTooLargeError, match="metadata update"):
        system.update_metadata(agent.id, {"blob": "y" * 2000})
    assert system.metadata(agent.id) == {}
    assert system.events(agent.id) == []


def test_an_oversized_loop_fact_is_recorded_with_its_payload_left_out(world: LedgerWorld) -> None:
    world.model.add(script.tool_call("big", {}, call_id="c1"), script.text("ok"))
    system = world.open(max_event_bytes=1024)
    agent = system.create()
    agent.send(ak.user("q"))
    agent.wait_for_idle(timeout_seconds=10)
    (result,) = [e for e in all_events(system, agent.id) if e.type == "tool.result"]
    assert result.data["omitted"] == "too_large"
    assert result.data["call_id"] == "c1"
    assert result.data["max_event_bytes"] == 1024
    assert result.data["bytes"] > 4000
    assert "message" not in result.data
    # The content itself is in the transcript: only the event's copy was left out.
    tool_message = agent.transcript()[2]
    assert isinstance(tool_message, ak.ToolResultMessage)
    assert tool_message.content == (ak.TextBlock(text="x" * 4000),)


def test_a_limit_too_small_is_refused_at_open(world: LedgerWorld) -> None:
    with pytest.raises(ak.InvalidConfigError, match="max_event_bytes"):
        world.open(max_event_bytes=10)
