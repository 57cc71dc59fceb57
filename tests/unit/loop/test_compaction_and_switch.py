"""Compaction and model/provider switches ."""

from __future__ import annotations

import pytest

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.types.records import CompactionRecord

from .conftest import World, roles, text_of

CLAUDE_MODELS = ("anthropic/claude-x", "anthropic/claude-a", "anthropic/claude-b")


def test_compaction_replaces_the_history_atomically_and_owes_no_answer(world: World) -> None:
    world.model.add(script.text("a1"), script.text("a2"))
    world.model.add_compactions(script.compacted(ak.user("summary of it all")))
    system = world.open()
    agent = system.create()
    agent.send(ak.user("q1"))
    agent.wait_for_idle(timeout_seconds=10)
    assert agent.context_tokens is not None

    agent.compact(wait=True, timeout_seconds=10)
    agent.wait_for_idle(timeout_seconds=10)

    assert [text_of(m) for m in agent.transcript()] == ["summary of it all"]
    records = system.internals.store.read(lambda tx: tx.records.load(agent.id))
    assert len(records) == 1
    assert isinstance(records[0], CompactionRecord)
    assert agent.context_tokens is None  # the measured conversation is gone
    assert len(world.model.requests) == 1  # a standalone compaction is not answered
    assert [text_of(m) for m in world.model.compactions[0].context.messages] == ["q1", "a1"]

    agent.send(ak.user("q2"))
    agent.wait_for_idle(timeout_seconds=10)
    assert [text_of(m) for m in agent.transcript()] == ["summary of it all", "q2", "a2"]


def test_a_failed_compaction_leaves_the_history_untouched_and_rejects_the_waiter(
    world: World,
) -> None:
    world.model.add(script.text("a1"))
    world.model.add_compactions(script.compaction_failed("no summary today"))
    system = world.open()
    agent = system.create()
    agent.send(ak.user("q1"))
    agent.wait_for_idle(timeout_seconds=10)

    with pytest.raises(ak.CompactionFailedError, match="no summary today"):
        agent.compact(wait=True, timeout_seconds=10)
    agent.wait_for_idle(timeout_seconds=10)
    assert [text_of(m) for m in agent.transcript()] == ["q1", "a1"]


def test_a_compaction_waits_for_the_tool_batch_and_keeps_queued_messages(world: World) -> None:
    world.model.add(script.tool_call("wait", {"text": "g"}), script.text("a1"), script.text("a2"))
    world.model.add_compactions(script.compacted(ak.user("summary")))
    system = world.open()
    agent = system.create()
    agent.send(ak.user("q1"))
    assert world.gate("g").entered.wait(10)
    agent.compact()
    agent.send(ak.user("q2"))
    world.gate("g").release.set()
    agent.wait_for_idle(timeout_seconds=10)

    transcript = agent.transcript()
    assert text_of(transcript[0]) == "summary"
    # The compaction ran at the safe boundary after the batch; the tool result it summarised
    # was still answered, and the queued message joined after the replacement.
    assert "q2" in [text_of(m) for m in transcript]
    assert text_of(transcript[-1]) == "a2"


def _serve_claude_too(world: World) -> None:
    """One scripted model behind both kinds: it serves the local name and the claude ones."""
    world.model = ak.ScriptedModel(models=("gym-1", *CLAUDE_MODELS))


def _two_kinds(world: World) -> ak.Providers:
    providers = ak.Providers()
    providers.add("local", world.model, kind="gym")
    providers.add("claude", world.model, kind="claude")
    return providers


def test_an_incompatible_switch_resets_the_history_with_the_message_that_asked(
    world: World,
) -> None:
    _serve_claude_too(world)
    world.model.add(script.text("a1"), script.text("a2"))
    system = world.open(providers=_two_kinds(world))
    agent = system.create()
    agent.send(ak.user("q1"))
    agent.wait_for_idle(timeout_seconds=10)

    agent.send(ak.user("q2"), provider="claude", model="anthropic/claude-x")
    agent.wait_for_idle(timeout_seconds=10)

    assert [text_of(m) for m in agent.transcript()] == ["q2", "a2"]
    assert (agent.settings.provider, agent.settings.model) == ("claude", "anthropic/claude-x")
    assert [s.options.instructions for s in world.model.model_sessions] == ["", ""]  # a new session


class Handoff(ak.Feature):
    name = "handoff"

    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.changes: list[ak.ModelChange] = []

    def model_changed(self, ctx: ak.HookContext, change: ak.ModelChange) -> ak.SystemMessage | None:
        self.changes.append(change)
        if self.fail:
            raise RuntimeError("no handoff")
        return ak.system("You were switched; earlier context is gone.")


def test_the_handoff_opens_the_reset_context(world: World) -> None:
    _serve_claude_too(world)
    handoff = Handoff()
    world.model.add(script.text("a1"), script.text("a2"))
    system = world.open(providers=_two_kinds(world), features=[handoff])
    agent = system.create()
    agent.send(ak.user("q1"))
    agent.wait_for_idle(timeout_seconds=10)
    agent.send(ak.user("q2"), provider="claude", model="anthropic/claude-x")
    agent.wait_for_idle(timeout_seconds=10)

    assert roles(agent.transcript()) == ["system", "user", "assistant"]
    assert [c.was_reset for c in handoff.changes] == [True]


def test_a_failing_hook_rejects_an_incompatible_switch_and_keeps_the_history(
    world: World,
) -> None:
    _serve_claude_too(world)
    world.model.add(script.text("a1"), script.text("a2"))
    system = world.open(providers=_two_kinds(world), features=[Handoff(fail=True)])
    agent = system.create()
    agent.send(ak.user("q1"))
    agent.wait_for_idle(timeout_seconds=10)
    agent.send(ak.user("q2"), provider="claude", model="anthropic/claude-x")
    agent.wait_for_idle(timeout_seconds=10)

    assert [text_of(m) for m in agent.transcript()] == ["q1", "a1", "q2", "a2"]
    assert (agent.settings.provider, agent.settings.model) == ("local", "gym-1")


def test_a_compatible_model_change_keeps_the_history(world: World) -> None:
    _serve_claude_too(world)
    providers = ak.Providers()
    providers.add("local", world.model, kind="gym")
    providers.add("claude", world.model, kind="claude")
    world.model.add(script.text("a1"), script.text("a2"), script.text("a3"))
    system = world.open(providers=providers, provider="claude", model="anthropic/claude-a")
    agent = system.create()
    agent.send(ak.user("q1"))
    agent.wait_for_idle(timeout_seconds=10)
    agent.send(ak.user("q2"), model="anthropic/claude-b")
    agent.wait_for_idle(timeout_seconds=10)

    assert [text_of(m) for m in agent.transcript()] == ["q1", "a1", "q2", "a2"]


def test_a_question_an_abort_left_unanswered_survives_a_compaction(world: World) -> None:
    """An aborted turn's question is not owed, but an explicit start answers it
    (docs/decisions.md). A compaction of that history keeps it so: not answered by itself,
    answered by an explicit start — it used to be sealed, recorded as owing nothing."""
    world.model.add(script.hang(), script.text("the answer, at last"))
    world.model.add_compactions(script.compacted(ak.user("summary"), ak.user("go")))
    system = world.open()
    agent = system.create()
    agent.send(ak.user("go"))
    assert world.model.wait_for_requests(1, timeout_seconds=10)
    agent.abort(wait=True, timeout_seconds=10)
    assert agent.wait_for_idle(timeout_seconds=10)

    agent.compact(wait=True, timeout_seconds=10)
    assert agent.wait_for_idle(timeout_seconds=10)

    (record,) = system.internals.store.read(lambda tx: tx.records.load(agent.id))
    assert isinstance(record, CompactionRecord)
    assert record.owes_answer
    assert agent.state == "idle"  # still not owed: the compaction answered nothing
    assert system.start() == []
    assert len(world.model.requests) == 1

    assert system.start(agent.id) == [agent.id]
    assert agent.wait_for_idle(timeout_seconds=10)
    assert text_of(agent.transcript()[-1]) == "the answer, at last"
    assert len(world.model.requests) == 2
