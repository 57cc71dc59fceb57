"""An incompatible switch restarts what the provider sees but archives the
old conversation, readable through ``Agent.history()`` until ``Agent.purge_archived()``.
Compaction archives what it replaces too (test_unserved_models.py has part (a))."""

from __future__ import annotations

import pytest

import agentkeep as ak
from agentkeep.history import HistoryEpoch
from agentkeep.providers import script

from .conftest import World, text_of

CLAUDE = "anthropic/claude-x"


def _two_kinds(world: World, claude: ak.ScriptedModel | None = None) -> ak.Providers:
    """The local kind serves gym-1; the claude kind serves a claude name. A switch between
    them is incompatible (the provider's view restarts)."""
    claude = claude or ak.ScriptedModel(models=(CLAUDE,))
    world.model.add(script.text("a1"))
    claude.add(script.text("a2"))
    providers = ak.Providers()
    providers.add("local", world.model, kind="gym")
    providers.add("claude", claude, kind="claude")
    return providers


def _texts(epoch: HistoryEpoch) -> list[str]:
    return [text_of(m) for m in epoch.messages]


def test_an_incompatible_switch_archives_the_old_conversation(world: World) -> None:
    system = world.open(providers=_two_kinds(world))
    agent = system.create()
    agent.send(ak.user("q1"))
    agent.wait_for_idle(timeout_seconds=10)

    agent.send(ak.user("q2"), provider="claude", model=CLAUDE)
    agent.wait_for_idle(timeout_seconds=10)

    # What the provider sees restarted ...
    assert [text_of(m) for m in agent.transcript()] == ["q2", "a2"]
    # ... and the old conversation is still readable, as an archived epoch.
    old, current = agent.history()
    assert (old.number, old.archived, old.reason) == (1, True, "model_switch")
    assert (old.provider, old.model) == ("local", "gym-1")
    assert _texts(old) == ["q1", "a1"]
    assert old.archived_at_ms is not None
    assert (current.number, current.archived, current.reason) == (2, False, None)
    assert (current.provider, current.model) == ("claude", CLAUDE)
    assert list(current.messages) == agent.transcript()


def test_the_archive_survives_a_restart_and_the_agent_resumes_on_the_new_model(
    world: World,
) -> None:
    claude = ak.ScriptedModel(models=(CLAUDE,))
    providers = _two_kinds(world, claude)
    system = world.open(providers=providers)
    agent = system.create()
    agent.send(ak.user("q1"))
    agent.wait_for_idle(timeout_seconds=10)
    agent.send(ak.user("q2"), provider="claude", model=CLAUDE)
    agent.wait_for_idle(timeout_seconds=10)
    system.close(timeout_seconds=10)

    claude.add(script.text("a3"))
    reopened = world.open(providers=providers)
    again = reopened.resolve(agent.id)
    assert [_texts(e) for e in again.history()] == [["q1", "a1"], ["q2", "a2"]]
    again.send(ak.user("q3"))
    again.wait_for_idle(timeout_seconds=10)
    assert [text_of(m) for m in again.transcript()] == ["q2", "a2", "q3", "a3"]
    assert (again.settings.provider, again.settings.model) == ("claude", CLAUDE)
    assert _texts(again.history()[0]) == ["q1", "a1"]


def test_purge_deletes_only_the_archived_epochs(world: World) -> None:
    system = world.open(providers=_two_kinds(world))
    agent = system.create()
    agent.send(ak.user("q1"))
    agent.wait_for_idle(timeout_seconds=10)
    agent.send(ak.user("q2"), provider="claude", model=CLAUDE)
    agent.wait_for_idle(timeout_seconds=10)

    purged = agent.purge_archived()

    assert (purged.epochs, purged.records) == (1, 2)
    (current,) = agent.history()
    assert (current.number, current.archived) == (2, False)  # numbers are never reused
    assert [text_of(m) for m in agent.transcript()] == ["q2", "a2"]
    assert (agent.purge_archived().epochs, agent.purge_archived().records) == (0, 0)


def test_compaction_archives_what_its_summary_replaces(world: World) -> None:
    world.model.add(script.text("a1"), script.text("a2"))
    world.model.add_compactions(script.compacted(ak.user("summary")))
    system = world.open()
    agent = system.create()
    agent.send(ak.user("q1"))
    agent.wait_for_idle(timeout_seconds=10)
    agent.compact(wait=True, timeout_seconds=10)
    agent.send(ak.user("q2"))
    agent.wait_for_idle(timeout_seconds=10)

    archived, current = agent.history()
    assert (archived.archived, archived.reason) == (True, "compaction")
    assert _texts(archived) == ["q1", "a1"]
    assert _texts(current) == ["summary", "q2", "a2"]


def test_unknown_agents_have_no_history(world: World) -> None:
    system = world.open()
    with pytest.raises(ak.UnknownAgentError):
        ak.Agent(system, "nosuchagent").history()
    with pytest.raises(ak.UnknownAgentError):
        ak.Agent(system, "nosuchagent").purge_archived()
