"""A module's start: every ``before_start`` settles before any agent is restored, every
``after_start`` runs once the owed agents were restored and started, and a failure of
either aborts ``open`` naming the module, leaving no thread behind."""

from __future__ import annotations

from typing import Any

import pytest
from tests.unit.modules.conftest import TIMEOUT, World, threads_now

import agentkeep as ak
from agentkeep.modules import AgentSnapshot, ModuleContext
from agentkeep.providers import script


def leave_owed_work(world: World) -> str:
    """An agent whose question a shutdown cut off: it owes work at the next open."""
    world.model.add(script.hang())
    system = world.open()
    agent = system.create()
    agent.send(ak.user("are you there?"))
    assert world.model.wait_for_requests(1, timeout_seconds=TIMEOUT)
    system.shutdown(timeout_seconds=0.2)
    return agent.id


def test_migrations_then_before_start_then_restore_then_after_start(world: World) -> None:
    owed = leave_owed_work(world)
    world.model = ak.ScriptedModel()
    world.model.add(script.text("yes"))
    events: list[Any] = []

    class Hooks(ak.ModuleHooks):
        def agent_restored_transact(self, ctx: ModuleContext, snapshot: AgentSnapshot) -> None:
            events.append(("restored_transact", snapshot.id))

        def agent_restored(self, ctx: ModuleContext, snapshot: AgentSnapshot) -> None:
            events.append(("restored", snapshot.id))

        def after_start(self, ctx: ModuleContext, agents: ak.AgentSystemRef) -> None:
            events.append("after_start")  # the owed agent was restored before this
            # ... and it runs: its question reaches the model.
            events.append(("running", world.model.wait_for_requests(1, timeout_seconds=TIMEOUT)))

    def migrate(ctx: ModuleContext) -> None:
        events.append("migration")

    def before_start(ctx: ModuleContext, agents: ak.AgentSystemRef) -> ak.ModuleHooks:
        # No agent has started: nothing was restored, nothing asked the model.
        events.append(("before_start", len(world.model.requests)))
        assert agents.agent_id is None
        return Hooks()

    system = world.open(
        modules=[ak.Module("order", migrations=[("m", migrate)], before_start=before_start)]
    )
    assert events == [
        "migration",
        ("before_start", 0),
        ("restored_transact", owed),
        ("restored", owed),
        "after_start",
        ("running", True),
    ]
    assert system.wait_for_idle(owed, timeout_seconds=TIMEOUT)
    assert isinstance(system.transcript(owed)[-1], ak.AssistantMessage)


def test_a_failing_before_start_aborts_open_and_starts_no_agent(world: World) -> None:
    owed = leave_owed_work(world)
    world.model = ak.ScriptedModel()
    later: list[str] = []

    def fine(ctx: ModuleContext, agents: ak.AgentSystemRef) -> None:
        later.append("fine")

    def broken(ctx: ModuleContext, agents: ak.AgentSystemRef) -> None:
        raise RuntimeError("cannot start")

    def never(ctx: ModuleContext, agents: ak.AgentSystemRef) -> None:
        later.append("never")

    before = threads_now()
    with pytest.raises(ak.ModuleStartError) as raised:
        world.open(
            modules=[
                ak.Module("fine", before_start=fine),
                ak.Module("broken", before_start=broken),
                ak.Module("never", before_start=never),
            ]
        )
    error = raised.value
    assert (error.module, error.hook, error.code) == (
        "broken",
        "before_start",
        "module_start_failed",
    )
    assert isinstance(error.__cause__, RuntimeError)
    assert later == ["fine"]
    assert world.model.requests == ()  # the owed agent was never resumed
    assert threads_now() - before == set()  # everything open started has stopped

    # The store was released and still owes the work: the next open resumes it.
    world.model.add(script.text("resumed"))
    system = world.open()
    assert system.wait_for_idle(owed, timeout_seconds=TIMEOUT)
    assert isinstance(system.transcript(owed)[-1], ak.AssistantMessage)


def test_a_failing_after_start_aborts_open_naming_it(world: World) -> None:
    class Hooks(ak.ModuleHooks):
        def after_start(self, ctx: ModuleContext, agents: ak.AgentSystemRef) -> None:
            raise ValueError("after start broke")

    before = threads_now()
    with pytest.raises(ak.ModuleStartError, match='after_start of module "late"') as raised:
        world.open(modules=[ak.Module("late", before_start=lambda ctx, agents: Hooks())])
    assert raised.value.hook == "after_start"
    assert threads_now() - before == set()
    world.open()  # the lock was released


def test_before_start_must_return_module_hooks_or_nothing(world: World) -> None:
    class NotHooks(ak.Feature):
        name = "x"

    with pytest.raises(ak.ModuleStartError, match="not a ModuleHooks"):
        world.open(modules=[ak.Module("odd", before_start=lambda ctx, agents: NotHooks())])


def test_before_start_state_reaches_the_hooks_through_the_shared_kv(world: World) -> None:
    """``before_start`` initializes; its hooks close over what it built, and the module's
    shared store is the one its per-agent hooks see as ``shared_kv``."""
    seen: list[Any] = []

    class Hooks(ak.ModuleHooks):
        def __init__(self, greeting: str) -> None:
            self.greeting = greeting

        def before_turn(
            self, ctx: ak.HookContext, turn: ak.TurnInfo
        ) -> list[ak.InjectAction] | None:
            seen.append((self.greeting, ctx.shared_kv.read("started"), ctx.agent_id))
            return None

    def before_start(ctx: ModuleContext, agents: ak.AgentSystemRef) -> Hooks:
        ctx.shared_kv.write("started", "yes")
        return Hooks("hello")

    world.model.add(script.text("hi"))
    system = world.open(modules=[ak.Module("greeter", before_start=before_start)])
    agent = system.create()
    agent.send(ak.user("hi"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    assert seen == [("hello", "yes", agent.id)]
