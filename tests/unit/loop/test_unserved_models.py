"""A model its provider does not serve is refused before acceptance, with
an error naming what the provider serves, and nothing is written."""

from __future__ import annotations

import pytest

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.types import MessageOptions

from .conftest import World, text_of

CLAUDE = "anthropic/claude-x"


def _two_kinds(world: World) -> ak.Providers:
    providers = ak.Providers()
    providers.add("local", world.model, kind="gym")
    providers.add("claude", ak.ScriptedModel(models=(CLAUDE,)), kind="claude")
    return providers


def _records(system: ak.AgentSystem, agent_id: str) -> tuple[int, int]:
    """(records, queued messages) as durably stored."""
    return system.internals.store.read(
        lambda tx: (tx.records.count(agent_id), len(tx.queue.messages(agent_id)))
    )


def test_a_typod_model_is_refused_before_anything_is_written(world: World) -> None:
    world.model.add(script.text("a1"))
    system = world.open()
    agent = system.create()
    agent.send(ak.user("q1"))
    agent.wait_for_idle(timeout_seconds=10)
    before = _records(system, agent.id)

    with pytest.raises(ak.ModelNotServedError, match=r'does not serve model "gym-2".*gym-1'):
        agent.send(ak.user("oops"), model="gym-2", id="typo1")
    with pytest.raises(ak.ModelNotServedError):
        agent.steer(ak.user("oops"), model="gym-2")

    assert _records(system, agent.id) == before  # nothing queued, nothing appended
    assert [text_of(m) for m in agent.transcript()] == ["q1", "a1"]
    assert agent.settings.model == "gym-1"
    # The id was not taken either: the corrected message may reuse it.
    world.model.add(script.text("a2"))
    assert agent.send(ak.user("fixed"), id="typo1").created
    agent.wait_for_idle(timeout_seconds=10)
    assert [text_of(m) for m in agent.transcript()] == ["q1", "a1", "fixed", "a2"]


def test_the_model_is_checked_under_the_provider_the_message_will_run_on(
    world: World,
) -> None:
    providers = _two_kinds(world)
    system = world.open(providers=providers)
    agent = system.create()
    # The claude name is not the local provider's ...
    with pytest.raises(ak.ModelNotServedError, match='"local" does not serve'):
        agent.send(ak.user("q"), model=CLAUDE)
    # ... nor gym-1 claude's (a provider-only switch keeps the old model name) ...
    with pytest.raises(ak.ModelNotServedError, match='"claude" does not serve model "gym-1"'):
        agent.send(ak.user("q"), provider="claude")
    # ... but a queued switch counts: after it, the claude name alone is fine.
    switch = MessageOptions(provider="claude", model=CLAUDE)
    system.internals.accept(agent.id, "send", ak.user("q1"), options=switch, start=False)
    later = MessageOptions(model=CLAUDE)
    assert system.internals.accept(
        agent.id, "send", ak.user("q2"), options=later, start=False
    ).created


def test_an_unserved_system_default_is_refused_at_open(world: World) -> None:
    with pytest.raises(ak.ModelNotServedError, match='"local" does not serve model "gym-9"'):
        world.open(model="gym-9")
