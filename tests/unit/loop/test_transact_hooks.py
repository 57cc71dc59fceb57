"""The transactional lifecycle hooks (docs/hooks.md): each ``…_transact`` twin of a loop,
turn, inference, event or settlement hook runs inside the transaction that makes its
lifecycle fact durable, told the lifecycle ids; its writes commit with the fact, and a raise
rolls both back. The settlement id is persisted before its first hook and survives a crash.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.runtime import commit_plans
from agentkeep.runtime.kv_areas import KV_AREA, area_prefix
from agentkeep.types import AssistantBlock, TextBlock, ToolCallBlock, ToolCallStart

from .conftest import World, printed, python_child, roles

TRANSACT = (
    "before_agent_loop_transact",
    "before_turn_transact",
    "before_inference_transact",
    "on_event_transact",
    "after_inference_transact",
    "after_turn_transact",
    "after_agent_loop_transact",
    "after_agent_settled_transact",
)
OBSERVED = (
    "before_agent_loop",
    "before_turn",
    "before_inference",
    "after_inference",
    "after_turn",
    "after_agent_loop",
    "after_agent_settled",
)

Ids = tuple[str | None, str | None, str | None, str | None]


def _ids(ctx: ak.HookContext) -> Ids:
    return (ctx.loop_id, ctx.turn_id, ctx.inference_id, ctx.settlement_id)


class Ledger(ak.Feature):
    """Every lifecycle hook, transactional or not: records (hook, ids) in order; each
    transactional one writes ``<hook>`` to its KV (``run_kv`` is erased by the settlement,
    so ``kv``), and raises instead if it is ``fail``."""

    name = "ledger"

    def __init__(self, fail: str | None = None) -> None:
        self.fail = fail
        self.seen: list[tuple[str, Ids]] = []
        self.blocks: list[AssistantBlock] = []

    def _tx(self, hook: str, ctx: ak.HookContext) -> None:
        ctx.kv.write(hook, list(_ids(ctx)))
        if hook == self.fail:
            raise RuntimeError(f"{hook} refuses")
        self.seen.append((hook, _ids(ctx)))

    def _obs(self, hook: str, ctx: ak.HookContext) -> None:
        self.seen.append((hook, _ids(ctx)))

    def before_agent_loop_transact(self, ctx: ak.HookContext) -> None:
        self._tx("before_agent_loop_transact", ctx)

    def before_turn_transact(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> None:
        self._tx("before_turn_transact", ctx)

    def before_inference_transact(self, ctx: ak.HookContext) -> None:
        self._tx("before_inference_transact", ctx)

    def on_event_transact(self, ctx: ak.HookContext, block: AssistantBlock) -> None:
        self._tx("on_event_transact", ctx)
        self.blocks.append(block)

    def after_inference_transact(self, ctx: ak.HookContext, inference: ak.InferenceInfo) -> None:
        self._tx("after_inference_transact", ctx)

    def after_turn_transact(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> None:
        self._tx("after_turn_transact", ctx)

    def after_agent_loop_transact(self, ctx: ak.HookContext) -> None:
        self._tx("after_agent_loop_transact", ctx)

    def after_agent_settled_transact(self, ctx: ak.HookContext, error: str | None) -> None:
        self._tx("after_agent_settled_transact", ctx)

    def before_agent_loop(self, ctx: ak.HookContext) -> None:
        self._obs("before_agent_loop", ctx)

    def before_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> None:
        self._obs("before_turn", ctx)

    def before_inference(self, ctx: ak.HookContext) -> None:
        self._obs("before_inference", ctx)

    def after_inference(self, ctx: ak.HookContext, inference: ak.InferenceInfo) -> None:
        self._obs("after_inference", ctx)

    def after_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> None:
        self._obs("after_turn", ctx)

    def after_agent_loop(self, ctx: ak.HookContext) -> None:
        self._obs("after_agent_loop", ctx)

    def after_agent_settled(self, ctx: ak.HookContext, error: str | None) -> None:
        self._obs("after_agent_settled", ctx)

    def hooks(self) -> list[str]:
        return [hook for hook, _ in self.seen]

    def told(self, hook: str) -> list[Ids]:
        return [ids for name, ids in self.seen if name == hook]


def _kv(system: ak.AgentSystem, agent_id: str) -> dict[str, Any]:
    """The ledger feature's durable KV entries of ``agent_id`` (read from the store)."""
    prefix = area_prefix(agent_id, KV_AREA, "feature", "ledger")

    def read(tx: Any) -> dict[str, Any]:
        return {k[len(prefix) :]: v for k, v in tx.kv.scan(prefix)}

    return system.internals.store.read(read)


def _queued(system: ak.AgentSystem, agent_id: str) -> list[str]:
    return system.internals.store.read(lambda tx: [q.id for q in tx.queue.messages(agent_id)])


def test_each_twin_runs_in_its_order_told_its_observers_ids(world: World) -> None:
    ledger = Ledger()
    world.model.add(script.text("hello"))
    system = world.open(features=[ledger])
    agent = system.create()
    agent.send(ak.user("hi"), id="m1")
    assert agent.wait_for_idle(timeout_seconds=20)

    assert ledger.hooks() == [
        # One commit opens the loop and its first turn: both twins run in it.
        "before_agent_loop_transact",
        "before_turn_transact",
        "before_agent_loop",
        "before_turn",
        "before_inference_transact",
        "before_inference",
        # Observed as the response ends, before the commit that closes it (docs/hooks.md).
        "after_inference",
        "on_event_transact",
        "after_inference_transact",
        "after_turn_transact",
        "after_turn",
        "after_agent_loop_transact",
        "after_agent_loop",
        "after_agent_settled_transact",
        "after_agent_settled",
    ]
    # A twin is told what its observer is told; on_event_transact the request's ids.
    for hook in OBSERVED:
        assert ledger.told(f"{hook}_transact") == ledger.told(hook), hook
    (request,) = ledger.told("before_inference")
    assert ledger.told("on_event_transact") == [request]
    loop_id, turn_id, inference_id, _ = request
    assert None not in (loop_id, turn_id, inference_id)
    ((settle_loop, _, settle_inference, settlement_id),) = ledger.told("after_agent_settled")
    assert settle_loop == loop_id
    assert settle_inference is None
    assert settlement_id is not None
    assert ledger.told("before_turn") == [(loop_id, turn_id, None, None)]
    # Every twin's write committed with its fact.
    assert set(_kv(system, agent.id)) == set(TRANSACT)
    assert ledger.blocks == [TextBlock(text="hello")]
    assert agent.state == "idle"


@pytest.mark.parametrize("hook", ["before_agent_loop_transact", "before_turn_transact"])
def test_a_refused_opening_rolls_the_turn_opening_back(world: World, hook: str) -> None:
    ledger = Ledger(fail=hook)
    world.model.add(script.text("never"))
    system = world.open(features=[ledger])
    agent = system.create()
    agent.send(ak.user("hi"), id="m1")
    assert agent.wait_for_idle(timeout_seconds=20)

    assert hook not in _kv(system, agent.id)  # rolled back with the opening commit
    assert _queued(system, agent.id) == ["m1"]  # nothing consumed: the turn never opened
    assert not world.model.requests
    assert roles(agent.transcript()) == ["system"]  # the failed turn's note, only
    assert agent.state == "owes_work"
    assert "before_turn" not in ledger.hooks()


def test_a_refused_request_opening_makes_no_request(world: World) -> None:
    ledger = Ledger(fail="before_inference_transact")
    world.model.add(script.text("never"))
    system = world.open(features=[ledger])
    agent = system.create()
    agent.send(ak.user("hi"), id="m1")
    assert agent.wait_for_idle(timeout_seconds=20)

    assert "before_inference_transact" not in _kv(system, agent.id)
    assert not world.model.requests
    assert "before_inference" not in ledger.hooks()
    assert roles(agent.transcript()) == ["user", "system"]  # the message, the note
    assert agent.state == "owes_work"


@pytest.mark.parametrize("hook", ["on_event_transact", "after_inference_transact"])
def test_a_refused_block_or_response_end_rolls_the_response_back(world: World, hook: str) -> None:
    ledger = Ledger(fail=hook)
    world.model.add(script.text("lost"))
    system = world.open(features=[ledger])
    agent = system.create()
    agent.send(ak.user("hi"), id="m1")
    assert agent.wait_for_idle(timeout_seconds=20)

    assert hook not in _kv(system, agent.id)
    # The response's block did not land with the refused commit: the question stays owed.
    assert roles(agent.transcript()) == ["user", "system"]
    assert agent.state == "owes_work"
    assert "after_inference_transact" not in ledger.hooks()


@pytest.mark.parametrize("hook", ["after_turn_transact", "after_agent_loop_transact"])
def test_a_refused_closing_keeps_the_run_owed(world: World, hook: str) -> None:
    ledger = Ledger(fail=hook)
    world.model.add(script.text("kept"))
    system = world.open(features=[ledger])
    agent = system.create()
    agent.send(ak.user("hi"), id="m1")
    assert agent.wait_for_idle(timeout_seconds=20)

    assert hook not in _kv(system, agent.id)
    assert roles(agent.transcript()) == ["user", "assistant"]  # the answer is kept
    assert agent.state == "owes_work"  # the run did not close: it never settled
    assert hook.removesuffix("_transact") not in ledger.hooks()  # nor was it observed
    assert "after_agent_settled" not in ledger.hooks()


def test_a_refused_settlement_keeps_the_agent_owed_under_a_persisted_settlement_id(
    world: World,
) -> None:
    ledger = Ledger(fail="after_agent_settled_transact")
    world.model.add(script.text("answer"))
    system = world.open(features=[ledger])
    agent = system.create()
    agent.send(ak.user("hi"), id="m1")
    assert agent.wait_for_idle(timeout_seconds=20)

    assert "after_agent_settled_transact" not in _kv(system, agent.id)
    assert "after_agent_settled" not in ledger.hooks()
    assert agent.state == "owes_work"
    owed = system.internals.store.read(lambda tx: tx.facts.read_owed(agent.id))
    assert owed is not None
    assert owed.stage == "settlement"
    (loop_id, *_), *_ = ledger.told("before_turn")
    assert owed.loop_id == loop_id
    assert owed.settlement_id is not None
    system.close(timeout_seconds=10)

    # The next process settles the same loop under the same settlement id.
    after = Ledger()
    again = world.open(features=[after])
    assert again.wait_for_idle(agent.id, timeout_seconds=20)
    ((settled_loop, _, _, settlement_id),) = after.told("after_agent_settled_transact")
    assert (settled_loop, settlement_id) == (loop_id, owed.settlement_id)
    assert after.told("after_agent_settled") == after.told("after_agent_settled_transact")
    assert again.resolve(agent.id).state == "idle"


def test_a_message_after_a_refused_settlement_continues_the_loop_and_its_settlement(
    world: World,
) -> None:
    ledger = Ledger(fail="after_agent_settled_transact")
    world.model.add(script.text("one"), script.text("two"))
    system = world.open(features=[ledger])
    agent = system.create()
    agent.send(ak.user("first"), id="m1")
    assert agent.wait_for_idle(timeout_seconds=20)
    owed = system.internals.store.read(lambda tx: tx.facts.read_owed(agent.id))
    assert owed is not None

    ledger.fail = None
    agent.send(ak.user("second"), id="m2")  # accepted while the settlement is staged
    assert agent.wait_for_idle(timeout_seconds=20)

    ((loop_id, _, _, settlement_id),) = ledger.told("after_agent_settled_transact")
    assert (loop_id, settlement_id) == (owed.loop_id, owed.settlement_id)
    assert roles(agent.transcript()) == ["user", "assistant", "user", "assistant"]
    assert agent.state == "idle"


_SETTLING_CHILD = """
import json, sys, threading
import agentkeep as ak
from agentkeep.providers import script
from agentkeep.runtime import commit_plans
from agentkeep.runtime.kv_areas import KV_AREA, area_prefix

class Tell(ak.Feature):
    name = "tell"
    def after_agent_settled_transact(self, ctx, error):
        ctx.kv.write("settled", ctx.settlement_id)
        print(json.dumps(["settling", ctx.loop_id, ctx.settlement_id]), flush=True)
        threading.Event().wait()  # inside the settling transaction: killed here

model = ak.ScriptedModel()
model.add(script.text("answer"))
providers = ak.Providers()
providers.add("local", model, kind="gym")
system = ak.AgentSystem.open(sys.argv[1], providers=providers, provider="local",
                             model="gym-1", features=[Tell()])
system.create(id="a1").send(ak.user("question"))
threading.Event().wait()
"""


def test_a_crash_inside_the_settlement_settles_under_the_same_id_after_a_restart(
    tmp_path: Path,
) -> None:
    home = tmp_path / "state"
    with python_child(_SETTLING_CHILD, home) as child:
        for line in printed(child):
            if line[0] == "settling":
                _, loop_id, settlement_id = line
                break
        else:
            raise AssertionError("the child exited before it settled")
        os.kill(child.pid, signal.SIGKILL)  # a real crash, the settling transaction open

    world = World(home)
    after = Ledger()
    system = world.open(features=[after])
    try:
        assert system.wait_for_idle("a1", timeout_seconds=20)
        ((told_loop, _, _, told_settlement),) = after.told("after_agent_settled_transact")
        assert (told_loop, told_settlement) == (loop_id, settlement_id)
        assert after.told("after_agent_settled") == after.told("after_agent_settled_transact")
        assert system.resolve("a1").state == "idle"
        assert not world.model.requests  # the answer was durable: nothing asked again
    finally:
        system.close(timeout_seconds=10)


class Requests(ak.Feature):
    """The acceptance and event twins of a tool-request message, in order."""

    name = "ledger"

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.order: list[str] = []
        self.calls: list[tuple[AssistantBlock, Ids]] = []

    def message_accepted_transact(self, ctx: ak.HookContext, accepted: ak.MessageAccepted) -> None:
        self.order.append(f"accepted:{accepted.id}")

    def on_event_transact(self, ctx: ak.HookContext, block: AssistantBlock) -> None:
        if isinstance(block, ToolCallBlock):
            ctx.kv.write("call", block.call_id)
            if self.fail:
                raise RuntimeError("no calls today")
            self.order.append(f"call:{block.name}")
            self.calls.append((block, _ids(ctx)))
        else:
            self.order.append("block")

    def on_event(self, ctx: ak.HookContext, event: Any) -> None:
        if isinstance(event, ToolCallStart):
            self.order.append("live:toolcall_start")


class RequestsWithTurns(Requests):
    """Overrides ``before_turn``: no acceptance consumes for the run (``loop.offers``), so the
    consumption is the loop's own commit."""

    def before_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> None:
        return None


@pytest.mark.parametrize("kind", [Requests, RequestsWithTurns])
def test_on_event_transact_gets_a_tool_request_call_in_the_acceptance_transaction(
    world: World, kind: type[Requests]
) -> None:
    feature = kind()
    world.model.add(script.text("done"))
    system = world.open(features=[feature])
    agent = system.create()
    agent.send(ak.user(["/echo ", ak.tool_request("echo", {"text": "hi"})]), id="req")
    assert agent.wait_for_idle(timeout_seconds=20)

    # After the acceptance hooks, in the same transaction; the live events after it.
    assert feature.order[:3] == ["accepted:req", "call:echo", "live:toolcall_start"]
    ((call, (loop_id, turn_id, inference_id, _)),) = feature.calls
    assert isinstance(call, ToolCallBlock)
    assert call.name == "echo"
    assert loop_id is not None
    assert turn_id is not None
    assert inference_id is None  # no inference is made up for a requested call
    assert _kv(system, agent.id)["call"] == call.call_id
    assert world.tool_runs == ["echo:hi"]


def test_a_refused_tool_request_call_rolls_the_acceptance_back(world: World) -> None:
    feature = Requests(fail=True)
    world.model.add(script.text("never"))
    system = world.open(features=[feature])
    agent = system.create()
    agent.send(ak.user(["/echo ", ak.tool_request("echo", {"text": "hi"})]), id="req")
    assert agent.wait_for_idle(timeout_seconds=20)

    assert "call" not in _kv(system, agent.id)
    assert _queued(system, agent.id) == ["req"]  # the consumption rolled back whole
    assert world.tool_runs == []
    assert agent.state == "owes_work"


def _plans_of_one_step(
    world: World, monkeypatch: pytest.MonkeyPatch, features: list[ak.Feature]
) -> list[str]:
    """The plans committed for one answered message (the consumption's whether the run's
    own commit or the acceptance's transaction runs it)."""
    executed: list[str] = []
    execute = commit_plans.execute

    def recording(tx: Any, agent_id: str, plan: Any, *args: Any) -> Any:
        executed.append(type(plan).__name__)
        return execute(tx, agent_id, plan, *args)

    monkeypatch.setattr(commit_plans, "execute", recording)
    world.model.add(script.text("hello"))
    system = world.open(features=features)
    agent = system.create()
    agent.send(ak.user("hi"))
    assert agent.wait_for_idle(timeout_seconds=20)
    system.close(timeout_seconds=10)
    return executed


class Observer(ak.Feature):
    """Overrides only observing hooks: no twin."""

    name = "observer"

    def on_event(self, ctx: ak.HookContext, event: Any) -> None:
        return None

    def after_agent_settled(self, ctx: ak.HookContext, error: str | None) -> None:
        return None


def test_a_twin_nobody_overrides_costs_no_commit(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The hot path: the consumption, then the reply with the settlement in one commit,
    # with or without observers.
    step = ["ConsumeQueue", "FinishResponse"]
    assert _plans_of_one_step(world, monkeypatch, []) == step
    assert _plans_of_one_step(world, monkeypatch, [Observer()]) == step


def test_overridden_twins_get_the_commits_they_run_in(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _plans_of_one_step(world, monkeypatch, [Ledger()]) == [
        "StageOwed",  # the loop's and turn's opening
        "ConsumeQueue",
        "ConsumeNotices",  # the request's opening: the inference stage's transaction
        "FinishResponse",  # the blocks' and the response's end
        "LifecycleEdge",  # the turn's closing
        "LifecycleEdge",  # the loop's closing
        "StageOwed",  # the settlement's id, staged
        "Settle",
    ]


class Forwarder(ak.Feature):
    """``after_turn_transact`` sends a copy to ``target``, then refuses if ``fail``."""

    name = "forwarder"

    def __init__(self, *, fail: bool) -> None:
        self.fail = fail
        self.target = ""

    def after_turn_transact(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> None:
        if ctx.agent_id == self.target:
            return
        ctx.system.send(self.target, ak.user("turn over"), id=f"copy-{ctx.turn_id}")
        if self.fail:
            raise RuntimeError("refused after sending")


@pytest.mark.parametrize("fail", [False, True])
def test_a_send_from_a_twin_joins_its_transaction(world: World, fail: bool) -> None:
    forwarder = Forwarder(fail=fail)
    world.model.add(script.text("answer"), script.text("noted"))
    system = world.open(features=[forwarder])
    other = system.create()
    forwarder.target = other.id
    agent = system.create()
    agent.send(ak.user("hi"))
    assert agent.wait_for_idle(timeout_seconds=20)
    assert other.wait_for_idle(timeout_seconds=20)

    delivered = [m for m in other.transcript() if roles([m]) == ["user"]]
    assert len(delivered) == (0 if fail else 1)  # rolled back with the hook's transaction
