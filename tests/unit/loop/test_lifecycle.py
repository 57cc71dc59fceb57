"""Lifecycle and references (refs, metadata, parents, passivation, close, shutdown)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.refs import AgentRef, AgentSystemRef

from .conftest import EchoArgs, World, text_of


def test_a_tool_gets_a_reference_without_close_wait_delete_or_start(world: World) -> None:
    seen: list[Any] = []

    @ak.tool
    def look(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Look at what the context carries."""
        seen.append(ctx.system)
        return "ok"

    world.model.add(script.tool_call("look", {}), script.text("done"))
    system = world.open(tools=[look])
    agent = system.create()
    agent.send(ak.user("go"))
    agent.wait_for_idle(timeout_seconds=10)

    (ref,) = seen
    assert isinstance(ref, AgentSystemRef)
    assert ref.agent_id == agent.id
    for missing in ("close", "wait_for_idle", "delete", "start", "shutdown"):
        assert not hasattr(ref, missing)
    assert not hasattr(ref.resolve(agent.id), "wait_for_idle")
    with pytest.raises(TypeError, match="no public constructor"):
        AgentRef(system, system.internals.acceptance, agent.id, _token=object())


def test_a_child_created_from_inside_an_agent_gets_it_as_parent(world: World) -> None:
    children: list[str] = []

    @ak.tool
    def spawn(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Create a child agent and give it a task."""
        child = ctx.system.create()
        child.send(ak.user("child task"))
        children.append(child.id)
        return child.id

    world.model.add(
        script.tool_call("spawn", {}), script.text("parent done"), script.text("child done")
    )
    system = world.open(tools=[spawn])
    parent = system.create()
    parent.send(ak.user("go"))
    parent.wait_for_idle(timeout_seconds=10)
    (child_id,) = children
    system.wait_for_idle(child_id, timeout_seconds=10)

    assert system.parent_of(child_id) == parent.id
    assert system.children_of(parent.id) == [child_id]
    assert text_of(system.transcript(child_id)[0]) == "child task"


def test_metadata_updates_merge_shallowly_and_are_durable(world: World) -> None:
    system = world.open()
    agent = system.create(ak.AgentConfig(metadata={"title": "one", "tags": ["a"]}))

    merged = system.update_metadata(agent.id, {"title": "two", "owner": "me"})

    assert merged == {"title": "two", "tags": ["a"], "owner": "me"}
    system.close()
    assert world.open().metadata(agent.id) == merged


def test_an_idle_agent_is_passivated_and_reading_it_does_not_start_it(world: World) -> None:
    world.model.add(script.text("a1"), script.text("a2"))
    system = world.open(idle_grace_seconds=0)
    agent = system.create()
    agent.send(ak.user("q1"))
    agent.wait_for_idle(timeout_seconds=10)
    assert system.internals.wait_for_passivation(agent.id, timeout_seconds=10)

    system.resolve(agent.id).transcript()
    system.update_metadata(agent.id, {"read": True})
    assert system.internals.live_agents() == []

    agent.send(ak.user("q2"))
    agent.wait_for_idle(timeout_seconds=10)
    assert [text_of(m) for m in agent.transcript()] == ["q1", "a1", "q2", "a2"]


def test_open_resumes_only_agents_that_owe_work(world: World) -> None:
    world.model.add(script.text("a1"))
    system = world.open()
    idle = [system.create() for _ in range(5)]
    owing = system.create()
    system.close()
    # Queue a message durably while no system runs (a crash after acceptance).
    from agentkeep.delivery import accept_message
    from agentkeep.persistence.store import Store
    from agentkeep.types import MessageOptions

    with Store.open(world.home) as store:
        store.transact(
            lambda tx: accept_message(
                tx,
                owing.id,
                queue="send",
                message=ak.user("left over"),
                message_id="leftover",
                options=MessageOptions(),
                metadata=None,
            )
        )
    system = world.open()
    system.wait_for_idle(owing.id, timeout_seconds=10)

    assert system.internals.live_agents() == [owing.id]
    assert text_of(system.transcript(owing.id)[-1]) == "a1"
    assert all(system.transcript(a.id) == [] for a in idle)


def test_close_admits_nothing_new_and_answers_what_it_admitted(world: World) -> None:
    world.model.add(script.tool_call("wait", {"text": "g"}), script.text("finished"))
    system = world.open()
    agent = system.create()
    agent.send(ak.user("go"))
    assert world.gate("g").entered.wait(10)
    world.gate("g").release.set()

    system.close(timeout_seconds=10)

    with pytest.raises(ak.AgentClosedError):
        agent.send(ak.user("too late"))
    reopened = world.open()
    assert text_of(reopened.transcript(agent.id)[-1]) == "finished"
    assert reopened.internals.store.read(lambda tx: tx.facts.read_owed(agent.id)) is None


def test_graceful_shutdown_lets_the_tool_finish_and_leaves_the_rest_owed(world: World) -> None:
    world.model.add(script.tool_call("wait", {"text": "g"}), script.text("after restart"))
    system = world.open()
    agent = system.create()
    agent.send(ak.user("go"))
    assert world.gate("g").entered.wait(10)
    done = threading.Thread(target=system.shutdown)
    done.start()
    world.gate("g").release.set()
    done.join(20)

    reopened = world.open()  # the owed inference resumes here
    reopened.wait_for_idle(agent.id, timeout_seconds=10)
    transcript = reopened.transcript(agent.id)
    assert text_of(transcript[2]) == "waited g"  # the in-flight tool finished and committed
    assert text_of(transcript[-1]) == "after restart"
    assert world.tool_runs == ["wait:g"]


class Strict(ak.Feature):
    name = "strict"

    def validate_settings(self, settings: dict[str, Any]) -> None:
        if not isinstance(settings.get("level"), int):
            raise ak.InvalidConfigError('feature "strict" needs an integer "level"')


def test_feature_settings_are_validated_by_the_feature_and_a_failed_create_takes_no_id(
    world: World,
) -> None:
    system = world.open(features=[Strict()])
    with pytest.raises(ak.InvalidConfigError, match="integer"):
        system.create(ak.AgentConfig(features={"strict": {"level": "high"}}), id="wanted")
    with pytest.raises(ak.InvalidConfigError, match="lacks"):
        system.create(ak.AgentConfig(features={"other": {}}), id="wanted")
    system.create(ak.AgentConfig(features={"strict": {"level": 2}}), id="wanted")
    with pytest.raises(ak.AgentExistsError):
        system.create(id="wanted")
    with pytest.raises(ak.UnknownAgentError):
        system.create(parent="nobody")


def test_a_deleted_id_can_be_created_again_and_starts_clean(world: World) -> None:
    world.model.add(script.text("a1"))
    system = world.open()
    agent = system.create(id="reused")
    agent.send(ak.user("q1"))
    agent.wait_for_idle(timeout_seconds=10)

    system.delete("reused")
    with pytest.raises(ak.UnknownAgentError):
        system.resolve("reused")
    again = system.create(id="reused")

    assert again.transcript() == []
