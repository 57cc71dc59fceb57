"""``compact`` on an agent with no messages is a no-op (no "Summary of 0
messages", no provider call)."""

from __future__ import annotations

from .conftest import World


def test_compacting_an_empty_agent_is_a_no_op(world: World) -> None:
    system = world.open()
    agent = system.create()

    agent.compact(wait=True, timeout_seconds=10)
    agent.wait_for_idle(timeout_seconds=10)

    assert agent.transcript() == []
    assert system.internals.store.read(lambda tx: tx.records.count(agent.id)) == 0
    assert world.model.compactions == ()  # the provider was never asked
    assert agent.state == "idle"
