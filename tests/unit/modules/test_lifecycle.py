"""The agent lifecycle hook pairs of a module — created, restored, archived — each with an
immutable id/metadata snapshot and the module's shared KV: the transactional one inside the
transaction that makes the fact durable (a raise rolls it back and reaches the command), the
post-commit one after it; and the per-agent hooks a module gets by being a feature."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from tests.unit.modules.conftest import TIMEOUT, World

import agentkeep as ak
from agentkeep.modules import AgentSnapshot, ModuleContext
from agentkeep.providers import script


class Recorder(ak.ModuleHooks):
    """Records every lifecycle hook; refuses a fact whose metadata has ``refuse``."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, Any]]] = []
        self.refuse_restore = False
        self.snapshots: list[AgentSnapshot] = []

    def _note(self, hook: str, ctx: ModuleContext, snapshot: AgentSnapshot) -> None:
        self.snapshots.append(snapshot)
        self.events.append((hook, snapshot.id, dict(snapshot.metadata)))
        if hook.endswith("_transact"):
            assert ctx.db.in_transaction
            ctx.shared_kv.write(f"{hook}:{snapshot.id}", True)  # joins the fact's transaction
            if snapshot.metadata.get("refuse"):
                raise ValueError(f"{hook} refuses {snapshot.id}")

    def agent_created_transact(self, ctx: ModuleContext, snapshot: AgentSnapshot) -> None:
        self._note("agent_created_transact", ctx, snapshot)

    def agent_created(self, ctx: ModuleContext, snapshot: AgentSnapshot) -> None:
        self._note("agent_created", ctx, snapshot)

    def agent_restored_transact(self, ctx: ModuleContext, snapshot: AgentSnapshot) -> None:
        self._note("agent_restored_transact", ctx, snapshot)
        if self.refuse_restore:
            raise ValueError("restoration refused")

    def agent_restored(self, ctx: ModuleContext, snapshot: AgentSnapshot) -> None:
        self._note("agent_restored", ctx, snapshot)

    def agent_archived_transact(self, ctx: ModuleContext, snapshot: AgentSnapshot) -> None:
        self._note("agent_archived_transact", ctx, snapshot)

    def agent_archived(self, ctx: ModuleContext, snapshot: AgentSnapshot) -> None:
        self._note("agent_archived", ctx, snapshot)

    def metadata_changed_transact(self, ctx: ak.HookContext, change: ak.MetadataChange) -> None:
        self.events.append(("metadata_changed_transact", ctx.agent_id, dict(change.current)))

    def metadata_changed(self, ctx: ak.HookContext, change: ak.MetadataChange) -> None:
        self.events.append(("metadata_changed", ctx.agent_id, dict(change.current)))


def open_with(world: World, recorder: Recorder, **options: Any) -> ak.AgentSystem:
    return world.open(
        modules=[ak.Module("rec", before_start=lambda ctx, agents: recorder)], **options
    )


def module_keys(system: ak.AgentSystem) -> list[str]:
    rows = system.internals.store.read(lambda tx: tx.kv.scan("system.feature.rec."))
    return [key.removeprefix("system.feature.rec.") for key, _value in rows]


def test_creation_is_reported_in_its_transaction_and_after_it(world: World) -> None:
    recorder = Recorder()
    system = open_with(world, recorder)
    agent = system.create(ak.AgentConfig(metadata={"title": "t"}))
    assert recorder.events == [
        ("agent_created_transact", agent.id, {"title": "t"}),
        ("agent_created", agent.id, {"title": "t"}),
    ]
    assert module_keys(system) == [f"agent_created_transact:{agent.id}"]
    assert system.internals.live_agents() == []  # creating starts nothing

    snapshot = recorder.snapshots[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        snapshot.id = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        snapshot.metadata["title"] = "changed"  # type: ignore[index]


def test_a_refused_creation_leaves_nothing(world: World) -> None:
    recorder = Recorder()
    system = open_with(world, recorder)
    with pytest.raises(ValueError, match="refuses a1"):
        system.create(ak.AgentConfig(metadata={"refuse": True}), id="a1")
    with pytest.raises(ak.UnknownAgentError):
        system.resolve("a1")
    assert module_keys(system) == []  # the hook's write rolled back with the creation
    assert [e[0] for e in recorder.events] == ["agent_created_transact"]  # no post-commit


def test_a_session_start_is_a_creation(world: World) -> None:
    recorder = Recorder()
    system = open_with(world, recorder)
    system.registry.create({"id": "writer"})
    system.sessions.start("writer", id="s1", metadata={"k": 1})
    assert recorder.events == [
        ("agent_created_transact", "s1", {"k": 1}),
        ("agent_created", "s1", {"k": 1}),
    ]
    with pytest.raises(ValueError, match="refuses s2"):
        system.sessions.start("writer", id="s2", metadata={"refuse": True})
    assert [s.id for s in system.sessions.list()] == ["s1"]


def test_archival_is_reported_in_its_transaction_and_a_refusal_keeps_the_session(
    world: World,
) -> None:
    recorder = Recorder()
    system = open_with(world, recorder)
    kept = system.create()
    system.update_metadata(kept.id, {"refuse": True})  # the snapshot is the metadata now
    gone = system.create(ak.AgentConfig(metadata={"title": "done"}))
    recorder.events.clear()

    system.sessions.archive(gone.id)
    assert recorder.events == [
        ("agent_archived_transact", gone.id, {"title": "done"}),
        ("agent_archived", gone.id, {"title": "done"}),
    ]
    system.sessions.archive(gone.id)  # already archived: no fact, no hook
    assert len(recorder.events) == 2

    with pytest.raises(ValueError, match=f"refuses {kept.id}"):
        system.sessions.archive(kept.id)
    assert system.sessions.get(kept.id).status == "active"
    assert f"agent_archived_transact:{kept.id}" not in module_keys(system)
    assert recorder.events[-1][0] == "agent_archived_transact"  # no post-commit hook


def test_an_agent_is_restored_once_per_load_into_memory(world: World) -> None:
    recorder = Recorder()
    system = open_with(world, recorder, idle_grace_seconds=0.01)
    agent = system.create(ak.AgentConfig(metadata={"title": "r"}))
    recorder.events.clear()
    world.model.add(script.text("one"), script.text("two"), script.text("three"))

    agent.send(ak.user("one"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    assert recorder.events == [
        ("agent_restored_transact", agent.id, {"title": "r"}),
        ("agent_restored", agent.id, {"title": "r"}),
    ]
    assert f"agent_restored_transact:{agent.id}" in module_keys(system)

    # Passivated (its actor stopped), then loaded again by new work: restored again.
    assert system.internals.wait_for_passivation(agent.id, timeout_seconds=TIMEOUT)
    agent.send(ak.user("two"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    restorations = [e for e in recorder.events if e[0] == "agent_restored"]
    assert len(restorations) == 2


def test_a_refused_restoration_fails_the_load_and_the_next_load_restores(world: World) -> None:
    recorder = Recorder()
    recorder.refuse_restore = True
    system = open_with(world, recorder)
    agent = system.create()
    world.model.add(script.text("answer"))

    agent.send(ak.user("hello"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    assert world.model.requests == ()  # the load failed: the model was never asked
    assert [e[0] for e in recorder.events if "restored" in e[0]] == ["agent_restored_transact"]
    assert f"agent_restored_transact:{agent.id}" not in module_keys(system)  # rolled back

    recorder.refuse_restore = False
    system.start(agent.id)  # its owed question: the next load restores it
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    assert [e[0] for e in recorder.events if "restored" in e[0]] == [
        "agent_restored_transact",
        "agent_restored_transact",
        "agent_restored",
    ]
    assert isinstance(system.transcript(agent.id)[-1], ak.AssistantMessage)


def test_metadata_changes_reach_modules_like_features(world: World) -> None:
    recorder = Recorder()
    system = open_with(world, recorder)
    agent = system.create()
    recorder.events.clear()
    system.update_metadata(agent.id, {"title": "new"})
    assert recorder.events == [
        ("metadata_changed_transact", agent.id, {"title": "new"}),
        ("metadata_changed", agent.id, {"title": "new"}),
    ]


def test_module_hooks_join_after_the_features_in_module_order(world: World) -> None:
    order: list[str] = []

    class Feature(ak.Feature):
        name = "feat"

        def before_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> None:
            order.append(f"{self.name}:{ctx.kv.read('mine')}")
            ctx.kv.write("mine", self.name)

    class Hooks(ak.ModuleHooks):
        def before_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> None:
            order.append(f"{self.name}:{ctx.kv.read('mine')}")  # its own scope: the module's
            ctx.kv.write("mine", self.name)

    world.model.add(script.text("a"), script.text("b"))
    system = world.open(
        features=[Feature()],
        modules=[
            ak.Module("m1", before_start=lambda ctx, agents: Hooks()),
            ak.Module("m2", before_start=lambda ctx, agents: Hooks()),
        ],
    )
    assert [f.name for f in system.internals.features.features] == ["feat", "m1", "m2"]
    agent = system.create()
    for text in ("one", "two"):
        agent.send(ak.user(text))
        assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    assert order == ["feat:None", "m1:None", "m2:None", "feat:feat", "m1:m1", "m2:m2"]


def test_a_misspelled_module_hook_is_refused_at_definition() -> None:
    with pytest.raises(ak.FeatureDefinitionError, match='did you mean "after_start"'):

        class Typo(ak.ModuleHooks):
            def after_strat(self, ctx: ModuleContext, agents: ak.AgentSystemRef) -> None:
                return


def test_a_send_from_a_creation_hook_joins_the_creation(world: World) -> None:
    """A transactional hook's send is part of the fact's transaction: delivered once the
    creation commits, and gone with it when a later module refuses the creation."""

    class Welcomer(ak.ModuleHooks):
        def agent_created_transact(self, ctx: ModuleContext, snapshot: AgentSnapshot) -> None:
            ctx.system.send(snapshot.id, ak.user("welcome"))

    class Gate(ak.ModuleHooks):
        def agent_created_transact(self, ctx: ModuleContext, snapshot: AgentSnapshot) -> None:
            if snapshot.metadata.get("refuse"):
                raise ValueError("the gate refuses")

    world.model.add(script.text("thanks"))
    system = world.open(
        modules=[
            ak.Module("welcomer", before_start=lambda ctx, agents: Welcomer()),
            ak.Module("gate", before_start=lambda ctx, agents: Gate()),
        ]
    )
    with pytest.raises(ValueError, match="the gate refuses"):
        system.create(ak.AgentConfig(metadata={"refuse": True}), id="refused")
    with pytest.raises(ak.UnknownAgentError):
        system.resolve("refused")

    agent = system.create(id="welcomed")
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    transcript = system.transcript(agent.id)
    assert [type(m).__name__ for m in transcript] == ["UserMessage", "AssistantMessage"]
    assert len(world.model.requests) == 1  # only the committed creation's welcome ran
