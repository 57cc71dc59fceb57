"""``AgentSystem.transaction(work)``: one store transaction an embedder opens.

KV writes and ``t.send``/``t.steer`` commit together (queue entry and owed fact inside the
transaction, the agent told only after the commit, never waited for); a raise rolls all of it
back and leaves no live effect; ``t`` expires with its work; a repeated message id is the same
idempotent repeat as outside. Every test would hang on a deadlock: the timeout below turns
that into a failure.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from tests.unit.loop.conftest import World, text_of

import agentkeep as ak
from agentkeep.providers import script

pytestmark = pytest.mark.timeout(60)

TIMEOUT = 20.0


class WorkFailedError(Exception):
    """The embedder's work failing."""


class Watch(ak.Feature):
    """Latches on each agent's runs; as the feature named ``embedder`` it reads the shared
    store the embedder's ``t.shared_kv("embedder")`` writes."""

    name = "embedder"

    def __init__(self) -> None:
        self.started: dict[str, threading.Event] = {}
        self.settled: dict[str, threading.Event] = {}
        self.seen_shared: list[Any] = []

    def latch(self, table: dict[str, threading.Event], agent_id: str) -> threading.Event:
        return table.setdefault(agent_id, threading.Event())

    def before_agent_loop(self, ctx: ak.HookContext) -> None:
        self.seen_shared.append(ctx.shared_kv.read("count"))
        self.latch(self.started, ctx.agent_id).set()

    def after_agent_settled(self, ctx: ak.HookContext, error: str | None) -> None:
        self.latch(self.settled, ctx.agent_id).set()


def queued(system: ak.AgentSystem, agent_id: str) -> list[str]:
    return system.internals.store.read(lambda tx: [q.id for q in tx.queue.messages(agent_id)])


def owed(system: ak.AgentSystem, agent_id: str) -> object:
    return system.internals.store.read(lambda tx: tx.facts.read_owed(agent_id))


def shared(system: ak.AgentSystem, name: str) -> ak.KeyValueStore:
    return system.internals.store.kv("system", "feature", name)


def bounded(call: Callable[[], Any], seconds: float = TIMEOUT) -> Any:
    """``call()`` in a thread of its own; fails if it has not returned within ``seconds``
    (a deadlock or a wait on an agent shows as a failure, not a hang)."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(("ok", call()))
        except BaseException as exc:
            outcome.append(("raised", exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"still waiting after {seconds} s"
    kind, value = outcome[0]
    if kind == "raised":
        raise value
    return value


def test_two_sends_and_a_kv_write_commit_together_and_both_are_answered(world: World) -> None:
    watch = Watch()
    world.model.add(script.text("answered"), script.text("answered"))
    system = world.open(features=[watch])
    a, b = system.create(), system.create()

    def work(t: ak.SystemTransaction) -> tuple[ak.Delivery, ak.Delivery]:
        t.shared_kv("embedder").write("count", 2)
        t.agent_kv(a.id, "embedder").write("note", "hello")
        first = t.send(a.id, ak.user("to a"), id="ma")
        second = t.steer(b.id, ak.user("to b"), id="mb")
        return first, second

    first, second = system.transaction(work)

    assert (first.id, first.delivery, first.created) == ("ma", "send", True)
    assert (second.id, second.delivery, second.created) == ("mb", "steer", True)
    for agent in (a, b):
        assert watch.latch(watch.settled, agent.id).wait(TIMEOUT)
        assert [text_of(m) for m in agent.transcript()][-2:] == [
            f"to {'a' if agent is a else 'b'}",
            "answered",
        ]
    # The feature named "embedder" saw what the embedder wrote, before either run began.
    assert watch.seen_shared == [2, 2]
    assert shared(system, "embedder").read("count") == 2
    note = system.internals.store.kv("agent", a.id, "kv", "feature", "embedder")
    assert note.read("note") == "hello"


def test_a_raise_rolls_everything_back_and_leaves_no_live_effect(world: World) -> None:
    watch = Watch()
    world.model.add(script.text("later"))
    system = world.open(features=[watch])
    agent = system.create()
    ledger_before = system.events(agent.id)
    live_inside: list[bool] = []

    def work(t: ak.SystemTransaction) -> None:
        t.shared_kv("embedder").write("count", 1)
        t.agent_kv(agent.id, "embedder").write("note", "never")
        assert t.send(agent.id, ak.user("never sent"), id="gone").created
        assert t.steer(agent.id, ak.user("never steered"), id="gone2").created
        live_inside.append(agent.id in system.internals.live_agents())
        raise WorkFailedError("the embedder's work failed")

    with pytest.raises(WorkFailedError):
        system.transaction(work)

    assert live_inside == [False]
    assert queued(system, agent.id) == []
    assert owed(system, agent.id) is None
    assert system.events(agent.id) == ledger_before
    assert shared(system, "embedder").read("count") is None
    assert system.internals.store.kv("agent", agent.id, "kv", "feature", "embedder").list() == []
    assert agent.id not in system.internals.live_agents()
    assert agent.id not in watch.started
    assert system.state(agent.id) == "idle"
    # The ids went with the rollback: offered again, they are new.
    assert agent.send(ak.user("now"), id="gone").created
    assert watch.latch(watch.settled, agent.id).wait(TIMEOUT)
    assert [text_of(m) for m in agent.transcript()][-2:] == ["now", "later"]


def test_a_send_to_a_passivated_agent_does_not_start_it_before_the_commit(world: World) -> None:
    watch = Watch()
    world.model.add(script.text("first"), script.text("second"))
    system = world.open(features=[watch], idle_grace_seconds=0)
    agent = system.create()
    agent.send(ak.user("one"))
    assert watch.latch(watch.settled, agent.id).wait(TIMEOUT)
    assert system.internals.wait_for_passivation(agent.id, timeout_seconds=TIMEOUT)
    watch.started.clear()
    watch.settled.clear()
    inside: list[tuple[bool, bool]] = []

    def work(t: ak.SystemTransaction) -> ak.Delivery:
        delivery = t.send(agent.id, ak.user("two"))
        # Written, not yet committed: no actor was made, no run began.
        inside.append(
            (
                agent.id in system.internals.live_agents(),
                watch.latch(watch.started, agent.id).is_set(),
            )
        )
        return delivery

    delivery = bounded(lambda: system.transaction(work))

    assert delivery.created
    assert inside == [(False, False)]
    assert watch.latch(watch.started, agent.id).wait(TIMEOUT)  # the commit started it
    assert watch.latch(watch.settled, agent.id).wait(TIMEOUT)
    assert [text_of(m) for m in agent.transcript()][-2:] == ["two", "second"]


def test_a_send_to_a_running_agent_never_waits_for_it(world: World) -> None:
    watch = Watch()
    world.model.add(
        script.tool_calls(script.call("wait", {"text": "hold"}, call_id="c1")),
        script.text("after the steer"),
    )
    system = world.open(features=[watch])
    agent = system.create()
    agent.send(ak.user("go"))
    assert world.gate("hold").entered.wait(TIMEOUT)  # its tool call holds the run

    delivery = bounded(lambda: system.transaction(lambda t: t.steer(agent.id, ak.user("turn"))))

    assert delivery.created
    world.gate("hold").release.set()
    assert watch.latch(watch.settled, agent.id).wait(TIMEOUT)
    texts = [text_of(m) for m in agent.transcript()]
    assert "turn" in texts
    assert texts[-1] == "after the steer"


def test_a_repeated_id_is_the_same_idempotent_repeat_inside_a_transaction(world: World) -> None:
    watch = Watch()
    world.model.add(script.text("one"), script.text("two"))
    system = world.open(features=[watch])
    agent = system.create()
    assert agent.send(ak.user("once"), id="m1").created
    assert watch.latch(watch.settled, agent.id).wait(TIMEOUT)
    watch.settled.clear()

    def work(t: ak.SystemTransaction) -> list[bool]:
        return [
            t.send(agent.id, ak.user("once"), id="m1").created,  # durable before: found
            t.send(agent.id, ak.user("new"), id="m2").created,  # created here
            t.steer(agent.id, ak.user("new"), id="m2").created,  # found in this transaction
        ]

    assert system.transaction(work) == [False, True, False]
    assert agent.send(ak.user("new"), id="m2").created is False  # committed with it
    assert watch.latch(watch.settled, agent.id).wait(TIMEOUT)
    assert [text_of(m) for m in agent.transcript()][-4:] == ["once", "one", "new", "two"]


def test_the_transaction_and_its_stores_expire_when_the_work_returns(world: World) -> None:
    system = world.open()
    agent = system.create()

    kept = system.transaction(lambda t: t)
    store = system.transaction(lambda t: t.shared_kv("embedder"))

    assert not kept.active
    with pytest.raises(ak.ExpiredScopeError):
        kept.send(agent.id, ak.user("too late"))
    with pytest.raises(ak.ExpiredScopeError):
        kept.steer(agent.id, ak.user("too late"))
    with pytest.raises(ak.ExpiredScopeError):
        kept.shared_kv("embedder")
    with pytest.raises(ak.ExpiredScopeError):
        kept.agent_kv(agent.id, "embedder")
    with pytest.raises(ak.ExpiredScopeError):
        store.write("k", 1)
    with pytest.raises(ak.ExpiredScopeError):
        store.read("k")
    assert queued(system, agent.id) == []


def test_an_unknown_agent_is_refused_inside_and_the_transaction_rolls_back(world: World) -> None:
    system = world.open()

    def work(t: ak.SystemTransaction) -> None:
        t.shared_kv("embedder").write("count", 7)
        t.send("nosuchagent", ak.user("to nobody"))

    with pytest.raises(ak.UnknownAgentError):
        system.transaction(work)
    with pytest.raises(ak.UnknownAgentError):
        system.transaction(lambda t: t.agent_kv("nosuchagent", "embedder"))
    assert shared(system, "embedder").read("count") is None
