"""Permission modes that do something: the mode is on every context the runtime
derives, tools included; a message changes it when consumed, so a response and the tools it
dispatched finish under the mode they started in; each change is reported through
``permission_mode_changed_transact`` / ``permission_mode_changed``; ``before_tool_call`` may
choose another mode for one execution. The runtime enforces nothing."""

from __future__ import annotations

from typing import Any

import pytest

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.tools import BasicToolContext

from .conftest import EchoArgs, World, roles

TIMEOUT = 20


def mode_tool(world: World, seen: list[tuple[str, str]]) -> ak.Tool[Any, Any]:
    """``mode`` records the permission mode its context carries — read after the gate named
    by its text (if any) opens, so a change made meanwhile would show."""

    @ak.tool
    def mode(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Report the permission mode."""
        if args.text.startswith("gate"):
            world.gate(args.text).wait()
        seen.append((args.text, ctx.permission_mode))
        return ctx.permission_mode

    return mode


class Journal(ak.Feature):
    """Records the permission-mode changes it is told of, and the modes its hooks see."""

    name = "journal"

    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.transacted: list[tuple[str, str]] = []
        self.observed: list[tuple[str, str]] = []
        self.ctx_modes: list[str] = []
        self.durable_when_observed: list[bool] = []
        self.tool_hook_modes: list[str] = []
        self.dispatch_modes: list[tuple[str, str]] = []

    def permission_mode_changed_transact(
        self, ctx: ak.HookContext, change: ak.PermissionModeChange
    ) -> None:
        ctx.kv.write(f"change.{change.current}", change.previous)  # joins the consumption
        if self.fail:
            raise RuntimeError("the journal refuses this change")
        self.transacted.append((change.previous, change.current))

    def permission_mode_changed(self, ctx: ak.HookContext, change: ak.PermissionModeChange) -> None:
        self.observed.append((change.previous, change.current))
        self.ctx_modes.append(ctx.permission_mode)
        self.durable_when_observed.append(ctx.kv.read(f"change.{change.current}") is not None)

    def before_tool_call_transact(self, ctx: ak.HookContext, call: ak.ToolCallInfo) -> None:
        self.dispatch_modes.append((ctx.permission_mode, call.permission_mode))

    def before_tool_call(
        self, ctx: ak.HookContext, call: ak.ToolCallInfo
    ) -> ak.ToolCallDecision | None:
        self.tool_hook_modes.append(ctx.permission_mode)
        return None


def test_a_tool_and_its_hooks_read_the_agent_mode(world: World) -> None:
    seen: list[tuple[str, str]] = []
    journal = Journal()
    world.model.add(script.tool_calls(script.call("mode", {"text": "a"})), script.text("one"))
    world.model.add(script.tool_calls(script.call("mode", {"text": "b"})), script.text("two"))
    system = world.open(features=[journal], tools=[mode_tool(world, seen)])
    agent = system.create()
    agent.send(ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    agent.send(ak.user("careful now"), permission_mode="read_only")
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert seen == [("a", "auto"), ("b", "read_only")]
    assert journal.tool_hook_modes == ["auto", "read_only"]
    assert journal.dispatch_modes == [("auto", "auto"), ("read_only", "read_only")]
    assert agent.settings.permission_mode == "read_only"


def test_a_steer_changes_the_mode_when_consumed_not_while_the_tools_run(world: World) -> None:
    seen: list[tuple[str, str]] = []
    journal = Journal()
    world.model.add(script.tool_calls(script.call("mode", {"text": "gate1"})))
    world.model.add(script.tool_calls(script.call("mode", {"text": "after"})), script.text("ok"))
    system = world.open(features=[journal], tools=[mode_tool(world, seen)])
    agent = system.create()
    agent.send(ak.user("go"))
    world.gate("gate1").entered.wait(TIMEOUT)
    agent.steer(ak.user("from now on, read only"), permission_mode="read_only")
    # Queued, not consumed: the durable mode and the hooks' reports wait for consumption.
    assert agent.settings.permission_mode == "auto"
    assert journal.transacted == []
    world.gate("gate1").release.set()
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    # The call in flight finished under the mode it started in; the next one runs under
    # the steered mode.
    assert seen == [("gate1", "auto"), ("after", "read_only")]
    assert journal.transacted == [("auto", "read_only")]
    assert journal.observed == [("auto", "read_only")]
    assert agent.settings.permission_mode == "read_only"


def test_each_change_is_reported_once_inside_its_transaction_then_after_commit(
    world: World,
) -> None:
    journal = Journal()
    world.model.add(script.text("1"), script.text("2"), script.text("3"), script.text("4"))
    system = world.open(features=[journal])
    agent = system.create()
    for mode in ("read_only", "read_only", None, "full_access"):
        agent.send(ak.user("next"), permission_mode=mode)
        assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    changes = [("auto", "read_only"), ("read_only", "full_access")]
    assert journal.transacted == changes
    assert journal.observed == changes
    assert journal.ctx_modes == ["read_only", "full_access"]  # observed under the new mode
    assert journal.durable_when_observed == [True, True]  # observed only after the commit


def test_a_failing_transactional_hook_rolls_the_change_back(world: World) -> None:
    journal = Journal(fail=True)
    world.model.add(script.text("never"))
    system = world.open(features=[journal])
    agent = system.create()
    agent.send(ak.user("read only please"), id="m1", permission_mode="read_only")
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    # Nothing of the consumption landed: the mode, the message (still queued), the
    # hook's own write; nothing observed, and the turn failed.
    assert agent.settings.permission_mode == "auto"
    assert roles(agent.transcript()) == ["system"]
    assert system.internals.store.read(lambda tx: [q.id for q in tx.queue.messages(agent.id)]) == [
        "m1"
    ]
    assert journal.observed == []
    assert journal.transacted == []
    assert agent.state == "owes_work"


def test_a_failing_observer_is_isolated(world: World) -> None:
    class Broken(ak.Feature):
        name = "broken"

        def permission_mode_changed(
            self, ctx: ak.HookContext, change: ak.PermissionModeChange
        ) -> None:
            raise RuntimeError("observer broke")

    journal = Journal()
    world.model.add(script.text("fine"))
    system = world.open(features=[Broken(), journal])
    agent = system.create()
    agent.send(ak.user("hello"), permission_mode="workspace_write")
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert journal.observed == [("auto", "workspace_write")]
    assert agent.settings.permission_mode == "workspace_write"


def test_before_tool_call_chooses_the_mode_of_one_execution(world: World) -> None:
    seen: list[tuple[str, str]] = []

    class Escalate(ak.Feature):
        name = "escalate"

        def __init__(self) -> None:
            self.later_saw: list[str] = []
            self.after_saw: list[str] = []

        def before_tool_call(
            self, ctx: ak.HookContext, call: ak.ToolCallInfo
        ) -> ak.ToolCallDecision | None:
            if call.arguments == EchoArgs(text="escalated"):
                return ak.ToolCallDecision(permission_mode="full_access")
            return None

        def after_tool_call(
            self, ctx: ak.HookContext, call: ak.ToolCallInfo, result: ak.ToolCallResult
        ) -> None:
            self.after_saw.append(call.permission_mode)

    class Later(ak.Feature):
        name = "later"

        def __init__(self) -> None:
            self.saw: list[str] = []

        def before_tool_call(
            self, ctx: ak.HookContext, call: ak.ToolCallInfo
        ) -> ak.ToolCallDecision | None:
            self.saw.append(call.permission_mode)
            return None

    escalate, later = Escalate(), Later()
    world.model.add(
        script.tool_calls(
            script.call("mode", {"text": "escalated"}, call_id="c1"),
            script.call("mode", {"text": "plain"}, call_id="c2"),
        ),
        script.text("done"),
    )
    system = world.open(features=[escalate, later], tools=[mode_tool(world, seen)])
    agent = system.create()
    agent.send(ak.user("go"), permission_mode="read_only")
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert sorted(seen) == [("escalated", "full_access"), ("plain", "read_only")]
    assert sorted(later.saw) == ["full_access", "read_only"]  # the chain sees the choice
    assert sorted(escalate.after_saw) == ["full_access", "read_only"]
    assert agent.settings.permission_mode == "read_only"  # the durable mode is unchanged


def test_a_decision_refuses_an_unknown_mode_or_a_mode_with_an_answer() -> None:
    with pytest.raises(ValueError, match="permission_mode must be one of"):
        ak.ToolCallDecision(permission_mode="root")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="either amends the call or answers it"):
        ak.ToolCallDecision(permission_mode="auto", answer="no")


def test_a_basic_tool_context_carries_a_mode() -> None:
    assert BasicToolContext().permission_mode == "auto"
    assert BasicToolContext(permission_mode="read_only").permission_mode == "read_only"
