"""An agent's own base state (instructions and tools): initial at ``create``, a session's
from its pinned revision, mutable through ``update_base_state``, durable across a reopen,
and what the model is sent at the next request."""

from __future__ import annotations

from typing import Any

import pytest
from tests.unit.sessions.conftest import REVIEWER, SYSTEM_INSTRUCTIONS, World, run_turn

import agentkeep as ak


def _tools(model: ak.ScriptedModel) -> set[str]:
    """The ids of the tools the model's last opened session was given."""
    return {
        t.name if t.namespace is None else f"{t.namespace}.{t.name}"
        for t in model.model_sessions[-1].options.tools
    }


def _open(world: World) -> ak.AgentSystem:
    system = world.open()
    world.other.add(*(ak.script.text(f"reply {n}") for n in range(6)))
    world.local.add(*(ak.script.text(f"reply {n}") for n in range(6)))
    return system


def test_create_sets_the_initial_state_and_update_changes_the_next_request(
    world: World,
) -> None:
    system = _open(world)
    agent = system.create(instructions="Be a pirate.", tools=["lookup", "git.status"])
    assert agent.base_state == ak.AgentBaseState(
        instructions="Be a pirate.", tools=("lookup", "git.status")
    )

    run_turn(system, agent.id, "hello")
    assert world.other.requests[-1].context.instructions == "Be a pirate."
    assert _tools(world.other) == {"lookup", "git.status"}

    changed = agent.update_base_state(instructions="Be terse.")
    assert changed == ak.AgentBaseState(instructions="Be terse.", tools=("lookup", "git.status"))
    run_turn(system, agent.id, "again")
    assert world.other.requests[-1].context.instructions == "Be terse."

    assert system.update_base_state(agent.id, tools=[]).tools == ()
    run_turn(system, agent.id, "no tools now")
    assert _tools(world.other) == set()

    assert system.update_base_state(agent.id, tools=None).tools is None  # every tool again
    run_turn(system, agent.id, "all tools")
    assert _tools(world.other) == {"lookup", "git.status", "shell"}

    system.close(timeout_seconds=10)
    reopened = world.open()
    assert reopened.base_state(agent.id) == ak.AgentBaseState(instructions="Be terse.")


def test_an_agent_left_alone_has_the_systems_state(world: World) -> None:
    system = _open(world)
    agent = system.create()
    assert agent.base_state == ak.AgentBaseState(instructions=SYSTEM_INSTRUCTIONS, tools=None)
    run_turn(system, agent.id, "hello")
    assert world.other.requests[-1].context.instructions == SYSTEM_INSTRUCTIONS


def test_a_session_starts_from_its_revision_and_may_change_it(world: World) -> None:
    system = _open(world)
    system.registry.create(REVIEWER)
    session = system.sessions.start("reviewer")
    assert system.base_state(session.id) == ak.AgentBaseState(
        instructions=REVIEWER["instructions"], tools=("git.status", "lookup")
    )

    system.update_base_state(session.id, instructions="Only security.", tools=["shell"])
    run_turn(system, session.id, "review")

    assert world.local.requests[-1].context.instructions == "Only security."
    assert _tools(world.local) == {"shell"}


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"tools": ["nope"]}, 'tools\\[0\\]: no tool "nope" is offered'),
        ({"tools": "lookup"}, "tools must be a list of tool ids"),
        ({"instructions": 3}, "instructions must be a string"),
    ],
)
def test_a_bad_state_is_refused_before_anything_is_written(
    world: World, options: dict[str, Any], match: str
) -> None:
    system = world.open()
    with pytest.raises(ak.InvalidConfigError, match=match):
        system.create(id="refused", **options)
    assert [info.id for info in system.agents()] == []
    agent = system.create()
    with pytest.raises(ak.InvalidConfigError, match=match):
        agent.update_base_state(**options)
    with pytest.raises(ak.UnknownAgentError):
        system.update_base_state("ghost", instructions="x")


def test_a_request_reads_the_base_state_once(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """The request's instructions and its tool selection come from one read of the base
    state (they agree, and a step pays one store read for them, not one each)."""
    from agentkeep.runtime import base_state

    system = _open(world)
    agent = system.create(instructions="Be a pirate.", tools=["lookup"])
    reads: list[str] = []
    current = base_state.BaseStateSource.current

    def counted(self: base_state.BaseStateSource) -> ak.AgentBaseState:
        reads.append("read")
        return current(self)

    monkeypatch.setattr(base_state.BaseStateSource, "current", counted)
    run_turn(system, agent.id, "hello")
    assert len(world.other.requests) == 1
    assert reads == ["read"]
    assert world.other.requests[-1].context.instructions == "Be a pirate."
    assert _tools(world.other) == {"lookup"}


def test_the_agent_reads_its_base_state_again_only_after_a_write(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step pays no store read for the base state while none was written: the agent keeps
    its reading until a base-state write commits, and the next request then has the new
    state (no request is sent with a stale one)."""
    from agentkeep.persistence.kv import ScopedKV

    system = _open(world)
    agent = system.create(instructions="Be a pirate.", tools=["lookup"])
    reads: list[str] = []
    read = ScopedKV.read

    def counted(self: ScopedKV, key: str) -> Any:
        if key == "base":
            reads.append(key)
        return read(self, key)

    monkeypatch.setattr(ScopedKV, "read", counted)
    run_turn(system, agent.id, "one")
    run_turn(system, agent.id, "two")
    assert len(reads) == 1  # the first request's; the second kept it
    assert world.other.requests[-1].context.instructions == "Be a pirate."

    agent.update_base_state(instructions="Be terse.", tools=[])
    reads.clear()
    run_turn(system, agent.id, "three")
    assert world.other.requests[-1].context.instructions == "Be terse."
    assert _tools(world.other) == set()
    assert reads.count("base") >= 1  # read again (the update's own read counts too)
