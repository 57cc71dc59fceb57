"""The history KV: a store on every hook and tool context that belongs to the current
conversation history. It survives turns and restarts; a committed compaction, an incompatible
model switch and a profile change erase it in the transaction that replaces the history (a
rolled-back replacement keeps it); a handle made before the erasure refuses use after it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import agentkeep as ak
from agentkeep.actors.plan_hooks import ConsumptionPolicy
from agentkeep.features import Feature, HookContext
from agentkeep.key_value import KeyValueStore
from agentkeep.loop.actions import CompactAction
from agentkeep.persistence import Store, Transaction
from agentkeep.providers import script
from agentkeep.types.records import CompactionRecord

from .conftest import EchoArgs, World, text_of

TIMEOUT = 10.0


class Notes(Feature):
    """Counts turns in its history KV and keeps the handles it was given."""

    name = "notes"

    def __init__(self, *, fail_accepting: bool = False) -> None:
        self.fail_accepting = fail_accepting
        self.turns: list[int] = []
        self.after: list[Any] = []
        self.handles: list[KeyValueStore] = []

    def before_turn(self, ctx: HookContext, turn: ak.TurnInfo) -> None:
        kv = ctx.history_kv
        self.handles.append(kv)
        count = (kv.read("turns") or 0) + 1
        kv.write("turns", count)
        self.turns.append(count)

    def after_turn(self, ctx: HookContext, turn: ak.TurnInfo) -> None:
        self.after.append(ctx.history_kv.read("turns"))

    def message_accepted_transact(self, ctx: HookContext, accepted: ak.MessageAccepted) -> None:
        if self.fail_accepting and text_of(accepted.message) == "boom":
            raise RuntimeError("refused after the reset")


def _turns(system: ak.AgentSystem, agent_id: str) -> Any:
    """The ``turns`` count the notes feature keeps in the agent's history KV, read raw."""
    key = "agent." + agent_id + ".history.feature.notes.turns"
    return system.internals.store.read(lambda tx: tx.kv.read(key))


def test_hooks_and_tools_share_nothing_but_each_keeps_its_history_kv_across_a_restart(
    world: World,
) -> None:
    seen: list[Any] = []

    @ak.tool
    def remember(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Remember the text for this history."""
        seen.append(ctx.history_kv.read("last"))
        ctx.history_kv.write("last", args.text)
        return "ok"

    notes = Notes()
    world.model.add(script.tool_call("remember", {"text": "one"}), script.text("a1"))
    system = world.open(features=[notes], tools=[remember])
    agent = system.create()
    agent.send(ak.user("q1"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    system.close(timeout_seconds=TIMEOUT)

    world.model.add(script.tool_call("remember", {"text": "two"}), script.text("a2"))
    reopened = world.open(features=[notes], tools=[remember])
    again = reopened.resolve(agent.id)
    again.send(ak.user("q2"))
    assert again.wait_for_idle(timeout_seconds=TIMEOUT)

    assert seen == [None, "one"]  # the tool's store outlived the process
    assert notes.turns == [1, 2]  # so did the feature's, and neither saw the other's keys
    assert _turns(reopened, agent.id) == 2


class Compactions(Feature):
    """Records the compaction hooks in order, with what each saw in the history KV."""

    name = "compactions"

    def __init__(self, *, fail_erased: bool = False) -> None:
        self.fail_erased = fail_erased
        self.seen: list[tuple[str, Any]] = []
        self.old: KeyValueStore | None = None
        self.expired: list[str] = []

    def before_turn(self, ctx: HookContext, turn: ak.TurnInfo) -> None:
        ctx.history_kv.write("topic", "the old history")

    def before_compaction(self, ctx: HookContext) -> None:
        self.old = ctx.history_kv
        self.seen.append(("before_compaction", self.old.read("topic")))

    def history_erased_transact(self, ctx: HookContext) -> None:
        self.seen.append(("history_erased_transact", ctx.history_kv.list()))
        ctx.history_kv.write("topic", "the summary")
        if self.fail_erased:
            raise RuntimeError("the hook refused the compaction")

    def after_compaction(self, ctx: HookContext) -> None:
        self.seen.append(("after_compaction", ctx.history_kv.read("topic")))
        assert self.old is not None
        try:
            self.old.read("topic")
        except ak.ExpiredScopeError as error:
            self.expired.append(str(error))


def test_a_compaction_runs_its_hooks_in_order_and_erases_the_history_kv_with_the_history(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the replacement transaction holds when history_erased_transact runs.
    records_then: list[int] = []
    erased = ConsumptionPolicy.history_erased

    def spy(self: ConsumptionPolicy, tx: Any) -> None:
        records_then.append(len(tx.records.load(self._agent_id)))
        erased(self, tx)

    monkeypatch.setattr(ConsumptionPolicy, "history_erased", spy)
    world.model.add(script.text("a1"))
    world.model.add_compactions(script.compacted(ak.user("summary")))
    feature = Compactions()
    system = world.open(features=[feature])
    agent = system.create()
    agent.send(ak.user("q1"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    agent.compact(wait=True, timeout_seconds=TIMEOUT)

    assert feature.seen == [
        ("before_compaction", "the old history"),
        ("history_erased_transact", []),  # erased before the hook, in its transaction
        ("after_compaction", "the summary"),  # the hook's write committed with the summary
    ]
    assert records_then == [0]  # the old records gone, the replacement not yet appended
    assert len(feature.expired) == 1  # the handle from before the compaction refuses use
    assert [text_of(m) for m in agent.transcript()] == ["summary"]


def test_a_failing_history_erased_transact_rolls_the_compaction_back(world: World) -> None:
    world.model.add(script.text("a1"))
    world.model.add_compactions(script.compacted(ak.user("summary")))
    feature = Compactions(fail_erased=True)
    system = world.open(features=[feature])
    agent = system.create()
    agent.send(ak.user("q1"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    with pytest.raises(ak.CompactionFailedError):
        agent.compact(wait=True, timeout_seconds=TIMEOUT)
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert [name for name, _ in feature.seen] == ["before_compaction", "history_erased_transact"]
    assert [text_of(m) for m in agent.transcript()] == ["q1", "a1"]
    assert not any(isinstance(r, CompactionRecord) for r in agent.history())
    # The history and its KV stay, the hook's write rolled back; the old handle still works.
    assert feature.old is not None
    assert feature.old.read("topic") == "the old history"


def test_a_compaction_whose_replacement_fails_keeps_the_history_kv(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure after the erasure, inside the replacement transaction (the crash the
    transaction stands for): the history KV is not erased without its history."""
    notes = Notes()
    world.model.add(script.text("a1"))
    world.model.add_compactions(script.compacted(ak.user("summary")))
    system = world.open(features=[notes])
    agent = system.create()
    agent.send(ak.user("q1"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    assert _turns(system, agent.id) == 1

    from agentkeep.persistence.records import RecordStatements

    def broken(self: Any, *args: Any) -> None:
        raise OSError("the disk failed mid-replacement")

    monkeypatch.setattr(RecordStatements, "replace", broken)
    with pytest.raises(ak.CompactionFailedError):
        agent.compact(wait=True, timeout_seconds=TIMEOUT)
    monkeypatch.undo()
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    # The compaction's own turn counted on: nothing was erased, and the first handle is
    # still the current history's.
    assert notes.turns == [1, 2]
    assert _turns(system, agent.id) == 2
    assert notes.handles[0].read("turns") == 2


def _serve_claude_too(world: World) -> ak.Providers:
    world.model = ak.ScriptedModel(models=("gym-1", "anthropic/claude-x"))
    providers = ak.Providers()
    providers.add("local", world.model, kind="gym")
    providers.add("claude", world.model, kind="claude")
    return providers


@pytest.mark.parametrize("change", ["model", "profile"])
def test_a_reset_erases_the_history_kv_and_expires_old_handles(world: World, change: str) -> None:
    providers = _serve_claude_too(world)
    notes = Notes()
    world.model.add(script.text("a1"), script.text("a2"))
    system = world.open(providers=providers, features=[notes])
    agent = system.create()
    agent.send(ak.user("q1"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    old = notes.handles[-1]
    assert old.read("turns") == 1

    if change == "model":
        agent.send(ak.user("q2"), provider="claude", model="anthropic/claude-x")
    else:
        agent.send(ak.user("q2"), profile="reviewer")
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert [text_of(m) for m in agent.transcript()] == ["q2", "a2"]
    # The second turn opened on the old history; consuming q2 reset it, erasing its KV.
    assert notes.turns == [1, 2]
    assert notes.after == [1, None]  # after the reset: the new history's store, empty
    assert _turns(system, agent.id) is None
    for handle in notes.handles:  # both were made before the reset
        with pytest.raises(ak.ExpiredScopeError):
            handle.read("turns")
        with pytest.raises(ak.ExpiredScopeError):
            handle.write("turns", 99)


@pytest.mark.parametrize("change", ["model", "profile"])
def test_a_reset_that_rolls_back_keeps_the_history_kv(world: World, change: str) -> None:
    """The reset erased the history KV, then a later hook of the same consumption failed:
    the whole consumption rolled back, so history and history KV are both still there."""
    providers = _serve_claude_too(world)
    notes = Notes(fail_accepting=True)
    world.model.add(script.text("a1"))
    system = world.open(providers=providers, features=[notes])
    agent = system.create()
    agent.send(ak.user("q1"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    if change == "model":
        agent.send(ak.user("boom"), provider="claude", model="anthropic/claude-x")
    else:
        agent.send(ak.user("boom"), profile="reviewer")
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert [text_of(m) for m in agent.transcript()][:2] == ["q1", "a1"]
    assert notes.turns == [1, 2]
    assert _turns(system, agent.id) == 2  # not erased: the reset rolled back
    assert notes.handles[0].read("turns") == 2  # still the current history's


def test_a_transactional_tool_and_a_plain_tool_allocate_once_in_both_stores(
    world: World,
) -> None:
    """``get_or_create`` on a tool's call-bound KV and history KV: allocated once, the
    same value on a second ask; in a transactional tool it joins the call's transaction."""
    ids: list[tuple[str, str, str]] = []
    kept: list[KeyValueStore] = []
    counter = iter(range(100))

    def allocate(ctx: ak.ToolContext, kind: str) -> str:
        first = ctx.kv.get_or_create("op", lambda: f"op-{next(counter)}")
        assert ctx.kv.get_or_create("op", lambda: f"op-{next(counter)}") == first
        shared = ctx.history_kv.get_or_create("session", lambda: f"s-{next(counter)}")
        ids.append((kind, first, shared))
        kept.append(ctx.history_kv)
        return "ok"

    @ak.tool
    def plain(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Allocate."""
        return allocate(ctx, "plain")

    @ak.tool(transactional=True)
    def inside(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Allocate in the call's transaction."""
        return allocate(ctx, "inside")

    world.model.add(
        script.tool_call("plain", {}),
        script.tool_call("plain", {}),
        script.tool_call("inside", {}),
        script.text("done"),
    )
    system = world.open(tools=[plain, inside])
    agent = system.create()
    agent.send(ak.user("q"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    (k1, op1, s1), (k2, op2, s2), (k3, op3, s3) = ids
    assert (k1, k2, k3) == ("plain", "plain", "inside")
    assert len({op1, op2, op3}) == 3  # one per call
    assert s1 == s2  # one per tool and history
    assert s3 != s1  # each tool its own history store
    for handle in kept:  # a tool's handle expires with its call
        with pytest.raises(ak.ExpiredScopeError):
            handle.read("session")


def test_an_erasure_expires_handles_only_once_it_commits(tmp_path: Path) -> None:
    """The generation check against the store: a rolled-back erasure expires nothing; a
    committed one expires every handle made before it, through the store or in a
    transaction, and the erasing transaction's own later handles see the new history."""
    from agentkeep.runtime.history_kv import erase_history_kv, history_kv

    with Store.open(tmp_path) as store:
        handle = store.handle
        old = history_kv("a", "feature", "f", store=handle)
        old.write("k", 1)

        def erase_then_fail(tx: Transaction) -> None:
            erase_history_kv(tx, "a")
            raise RuntimeError("crash before the commit")

        with pytest.raises(RuntimeError):
            handle.transact(erase_then_fail)
        assert old.read("k") == 1  # nothing committed: still the current history

        def erase(tx: Transaction) -> list[Any]:
            before = history_kv("a", "feature", "f", tx=tx)
            assert before.read("k") == 1
            erase_history_kv(tx, "a")
            with pytest.raises(ak.ExpiredScopeError):
                before.read("k")
            after = history_kv("a", "feature", "f", tx=tx)
            after.write("k", 2)
            return after.list()

        assert handle.transact(erase) == [("k", 2)]
        with pytest.raises(ak.ExpiredScopeError):
            old.read("k")
        with pytest.raises(ak.ExpiredScopeError):
            old.get_or_create("k", lambda: 3)
        assert history_kv("a", "feature", "f", store=handle).read("k") == 2


class CompactsOnce(Compactions):
    """Asks for a compaction from its first ``after_turn`` (an automatic compaction)."""

    def after_turn(self, ctx: HookContext, turn: ak.TurnInfo) -> list[Any]:
        if any(name == "before_compaction" for name, _ in self.seen):
            return []
        return [CompactAction()]


def test_a_compaction_a_hook_asks_for_runs_the_compaction_hooks_too(world: World) -> None:
    world.model.add(script.text("a1"))
    world.model.add_compactions(script.compacted(ak.user("summary")))
    feature = CompactsOnce()
    system = world.open(features=[feature])
    agent = system.create()
    agent.send(ak.user("q1"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert [name for name, _ in feature.seen] == [
        "before_compaction",
        "history_erased_transact",
        "after_compaction",
    ]
    assert len(feature.expired) == 1
    assert [text_of(m) for m in agent.transcript()] == ["summary"]
