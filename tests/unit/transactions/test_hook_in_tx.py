"""``ctx.in_tx(work)``: a hook reuses the transaction it runs in, or opens one.

In a transactional hook (``…_transact``) the work's writes and sends join the hook's own
transaction: they commit with it or roll back with it, and the agents hear only after the
commit. A hook outside any transaction opens one, as ``system.transaction`` does. Inside,
the references refuse what cannot join the transaction.
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


def shared(system: ak.AgentSystem, name: str) -> ak.KeyValueStore:
    return system.internals.store.kv("system", "feature", name)


def queued(system: ak.AgentSystem, agent_id: str) -> list[str]:
    return system.internals.store.read(lambda tx: [q.id for q in tx.queue.messages(agent_id)])


class Forwarder(ak.Feature):
    """On consuming ``m1`` (or ``bad``), records a note and forwards a copy through
    ``ctx.in_tx``; ``bad`` then fails the hook, rolling the consumption back."""

    name = "forwarder"

    def __init__(self) -> None:
        self.target = ""
        self.expired_after_return: list[bool] = []
        self.refused: dict[str, str] = {}
        self.forwarded = threading.Event()
        self.settled: dict[str, threading.Event] = {}

    def latch(self, agent_id: str) -> threading.Event:
        return self.settled.setdefault(agent_id, threading.Event())

    def after_agent_settled(self, ctx: ak.HookContext, error: str | None) -> None:
        self.latch(ctx.agent_id).set()

    def message_accepted_transact(self, ctx: ak.HookContext, accepted: ak.MessageAccepted) -> None:
        if accepted.id not in ("m1", "bad"):
            return

        def work(t: ak.SystemTransaction) -> ak.SystemTransaction:
            t.shared_kv("forwarder").write(f"note.{accepted.id}", True)
            t.send(self.target, ak.user(f"copy of {accepted.id}"), id=f"copy.{accepted.id}")
            return t

        kept = ctx.in_tx(work)
        # The hook's transaction is still open; the one lent to ``work`` is not.
        try:
            kept.send(self.target, ak.user("late"))
        except ak.ExpiredScopeError:
            self.expired_after_return.append(True)
        if accepted.id == "bad":
            raise RuntimeError("the forwarder refuses this one")
        self.refused = refusals(ctx, self.target)
        self.forwarded.set()


def refusals(ctx: ak.HookContext, other: str) -> dict[str, str]:
    """What the hook's references refuse inside its transaction."""
    calls: dict[str, Callable[[], Any]] = {
        "create": lambda: ctx.system.create(),
        "update_metadata": lambda: ctx.system.update_metadata(other, {"k": 1}),
        "compact": lambda: ctx.system.compact(other),
        "abort": lambda: ctx.system.abort(other),
        "ref.update_metadata": lambda: ctx.system.resolve(other).update_metadata({"k": 1}),
        "ref.compact": lambda: ctx.system.resolve(other).compact(),
        "ref.abort": lambda: ctx.system.resolve(other).abort(),
    }
    refused: dict[str, str] = {}
    for name, call in calls.items():
        try:
            call()
        except ak.TransactionScopeError as error:
            refused[name] = error.command
    return refused


def test_in_tx_in_a_transactional_hook_commits_with_the_hook(world: World) -> None:
    forwarder = Forwarder()
    world.model.add(script.text("a"), script.text("b"))
    system = world.open(features=[forwarder])
    other = system.create()
    forwarder.target = other.id
    agent = system.create()
    agent.send(ak.user("original"), id="m1")
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    assert forwarder.forwarded.wait(TIMEOUT)

    assert forwarder.expired_after_return == [True]
    assert forwarder.refused == {
        "create": "AgentSystemRef.create",
        "update_metadata": "AgentSystemRef.update_metadata",
        "compact": "AgentSystemRef.compact",
        "abort": "AgentSystemRef.abort",
        "ref.update_metadata": "AgentRef.update_metadata",
        "ref.compact": "AgentRef.compact",
        "ref.abort": "AgentRef.abort",
    }
    assert shared(system, "forwarder").read("note.m1") is True
    assert system.metadata(other.id) == {}
    assert forwarder.latch(other.id).wait(TIMEOUT)  # told after the commit, it ran
    assert [text_of(m) for m in other.transcript()][:1] == ["copy of m1"]


def test_in_tx_in_a_failing_transactional_hook_rolls_back_with_it(world: World) -> None:
    forwarder = Forwarder()
    system = world.open(features=[forwarder])
    other = system.create()
    forwarder.target = other.id
    agent = system.create()
    agent.send(ak.user("refused by the forwarder"), id="bad")
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert forwarder.expired_after_return  # it ran (and failed) at least once
    assert shared(system, "forwarder").read("note.bad") is None
    assert queued(system, other.id) == []
    assert other.id not in system.internals.live_agents()
    assert queued(system, agent.id) == ["bad"]  # the consumption rolled back too


class Opener(ak.Feature):
    """Outside any transaction (``after_agent_settled``), ``ctx.in_tx`` opens one."""

    name = "opener"

    def __init__(self) -> None:
        self.results: list[Any] = []
        self.done = threading.Event()

    def after_agent_settled(self, ctx: ak.HookContext, error: str | None) -> None:
        if self.done.is_set():
            return

        def work(t: ak.SystemTransaction) -> str:
            t.shared_kv("opener").write("settled", ctx.agent_id)
            return "committed"

        def failing(t: ak.SystemTransaction) -> None:
            t.shared_kv("opener").write("failed", True)
            raise LookupError("rolled back")

        self.results.append(ctx.in_tx(work))
        try:
            ctx.in_tx(failing)
        except LookupError as error:
            self.results.append(str(error))
        self.done.set()


def test_in_tx_outside_a_transaction_opens_one(world: World) -> None:
    opener = Opener()
    world.model.add(script.text("hello"))
    system = world.open(features=[opener])
    agent = system.create()
    agent.send(ak.user("hi"))
    assert opener.done.wait(TIMEOUT)

    assert opener.results == ["committed", "rolled back"]
    assert shared(system, "opener").read("settled") == agent.id
    assert shared(system, "opener").read("failed") is None
