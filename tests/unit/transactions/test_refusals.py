"""Inside a transaction the lifetime commands are refused at once, naming the command.

A transaction's work runs in the store writer's thread: a command that needs a transaction of
its own, waits for an agent or for the system, or has a live effect a rollback could not undo
would wait for the writer its caller holds (a deadlock) or escape the rollback. Each raises
``TransactionScopeError`` instead; the transaction itself goes on and commits. A deadlock
would show as the timeout below.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from tests.unit.loop.conftest import World

import agentkeep as ak

pytestmark = pytest.mark.timeout(60)

Command = Callable[[ak.AgentSystem, ak.Agent], Any]

COMMANDS: dict[str, Command] = {
    "AgentSystem.create": lambda s, a: s.create(),
    "AgentSystem.resolve": lambda s, a: s.resolve(a.id),
    "AgentSystem.delete": lambda s, a: s.delete(a.id),
    "AgentSystem.start": lambda s, a: s.start(a.id),
    "AgentSystem.send": lambda s, a: s.send(a.id, ak.user("outside t")),
    "AgentSystem.steer": lambda s, a: s.steer(a.id, ak.user("outside t")),
    "AgentSystem.update_metadata": lambda s, a: s.update_metadata(a.id, {"title": "x"}),
    "AgentSystem.abort": lambda s, a: s.abort(a.id),
    "AgentSystem.compact": lambda s, a: s.compact(a.id),
    "AgentSystem.wait_for_idle": lambda s, a: s.wait_for_idle(a.id),
    "AgentSystem.close": lambda s, a: s.close(),
    "AgentSystem.shutdown": lambda s, a: s.shutdown(),
    "AgentSystem.wait_for_shutdown": lambda s, a: s.wait_for_shutdown(),
    "AgentSystem.wait_for_failure": lambda s, a: s.wait_for_failure(),
    "AgentSystem.transaction": lambda s, a: s.transaction(lambda t: None),
    "Agent.send": lambda s, a: a.send(ak.user("outside t")),
    "Agent.steer": lambda s, a: a.steer(ak.user("outside t")),
    "Agent.update_metadata": lambda s, a: a.update_metadata({"title": "x"}),
    "Agent.abort": lambda s, a: a.abort(),
    "Agent.compact": lambda s, a: a.compact(),
    "Agent.wait_for_idle": lambda s, a: a.wait_for_idle(),
    "Agent.purge_archived": lambda s, a: a.purge_archived(),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_lifetime_command_inside_a_transaction_is_refused_naming_it(
    world: World, command: str
) -> None:
    system = world.open()
    agent = system.create(ak.AgentConfig(metadata={"title": "kept"}))

    def work(t: ak.SystemTransaction) -> ak.TransactionScopeError:
        t.shared_kv("embedder").write("before", 1)
        try:
            COMMANDS[command](system, agent)
        except ak.TransactionScopeError as refused:
            t.shared_kv("embedder").write("after", 2)  # the transaction goes on
            return refused
        raise AssertionError(f"{command} was not refused")

    refused = system.transaction(work)

    assert refused.command == command
    assert refused.code == "transaction_scope"
    assert isinstance(refused, ak.StoreError)
    assert str(refused).startswith(f"{command} is refused inside a transaction")
    kv = system.internals.store.kv("system", "feature", "embedder")
    assert (kv.read("before"), kv.read("after")) == (1, 2)
    # Nothing happened: no agent made, no message queued, the system still open.
    assert [info.id for info in system.agents()] == [agent.id]
    assert system.metadata(agent.id) == {"title": "kept"}
    assert system.state(agent.id) == "idle"
    assert system.transaction(lambda t: t.active)


def test_reads_of_committed_state_are_allowed_inside(world: World) -> None:
    system = world.open()
    agent = system.create(ak.AgentConfig(metadata={"title": "kept"}))

    def work(t: ak.SystemTransaction) -> tuple[Any, ...]:
        return (
            system.metadata(agent.id),
            system.state(agent.id),
            agent.transcript(),
            system.parent_of(agent.id),
            [info.id for info in system.agents()],
        )

    assert system.transaction(work) == ({"title": "kept"}, "idle", [], None, [agent.id])
