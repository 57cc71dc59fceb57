"""lifecycle_races: create / delete / resolve / close / shutdown racing sends.

The seeded campaign (:mod:`agentkeep.chaos.lifecycle`), its two mutants, and regression tests
pinning the two runtime bugs it found (at 1abc9d5, ``agentkeep chaos run --suite
lifecycle_races --seed 14`` shows both): a close or shutdown racing another one returned
before the store was released, and a send admitted before a delete began could start an actor
for the agent being deleted, which outlived the delete and wrote into the id's next life.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

import agentkeep as ak
from agentkeep.actors.agent_tier import AgentTier
from agentkeep.chaos import CallArgs, CampaignResult, default_providers, ledger_tools
from agentkeep.chaos.campaigns import SUITES
from agentkeep.chaos.lifecycle import lifecycle_races
from agentkeep.chaos.lifecycle_race import Plan
from agentkeep.persistence.store import Store
from agentkeep.providers import script

WAIT = 10.0  # bound of every wait in these tests
SETTLE = 0.5  # how long a call that must block is given to (wrongly) return


def test_lifecycle_races(seed: int, require_ok: Callable[[CampaignResult], None]) -> None:
    require_ok(lifecycle_races(seed))


# -- the bugs the campaign found -------------------------------------------------------------


class _Held:
    """A system whose one agent sits inside a tool until ``gate`` is set."""

    def __init__(self, home: Path) -> None:
        self.entered = threading.Event()
        self.gate = threading.Event()

        @ak.tool
        def hold(ctx: ak.ToolContext, args: CallArgs) -> str:
            """Block until the test releases it."""
            self.entered.set()
            self.gate.wait(WAIT)
            return "held"

        model = ak.ScriptedModel([script.tool_call("hold", {"call": "x"}), script.text("done")])
        providers = ak.Providers()
        providers.add("local", model, kind="gym")
        self.system = ak.AgentSystem.open(
            home, providers=providers, provider="local", model="gym-1", tools=[hold]
        )
        self.system.create(id="busy").send(ak.user("hold on"), id="hold")
        assert self.entered.wait(WAIT)

    def closing(self) -> None:
        """Return once a close has begun: the system refuses new work (a spin, no sleep)."""
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            try:
                self.system.update_metadata("busy", {})
            except ak.AgentClosedError:
                return
        raise AssertionError("the first close never began")


def _store_error(home: Path) -> Exception | None:
    try:
        Store.open(home).close()
    except Exception as error:  # StoreLockedError while a close still holds it
        return error
    return None


def test_a_close_racing_a_close_returns_only_once_the_store_is_free(tmp_path: Path) -> None:
    """Concurrent closers share one close: the second returns only once the
    store is released (invariant I28). It used to return at once (``if self._closing: return``)."""
    home = tmp_path / "state"
    held = _Held(home)
    first = threading.Thread(target=held.system.close, kwargs={"timeout_seconds": WAIT})
    first.start()
    held.closing()
    second = threading.Thread(target=held.system.shutdown)
    second.start()
    second.join(SETTLE)  # a shared close waits for the held agent: it cannot be done yet
    early = None if second.is_alive() else _store_error(home)
    held.gate.set()
    first.join(WAIT)
    second.join(WAIT)
    assert not first.is_alive()
    assert not second.is_alive()
    assert early is None, f"shutdown returned while the first close held the store: {early!r}"


def test_a_send_admitted_before_a_delete_leaves_the_deleted_agent_no_actor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A send admitted before a delete began used to commit after ``AgentTier.remove``
    returned (the agent had no actor to wait for) and then tell the agent, starting an actor
    for the agent being deleted that outlived the delete (invariant I25). The send is held between
    its commit and its tell, the delete before its row is removed."""
    system = ak.AgentSystem.open(
        tmp_path / "state",
        providers=default_providers(0),
        provider="local",
        model="gym-1",
        tools=ledger_tools(),
    )
    system.create(id="doomed")
    committed, send_go, row_pending, row_go = (threading.Event() for _ in range(4))
    transact = system.internals.store.transact

    def paced(work: Callable[[object], object]) -> object:
        """Holds the sender between its commit and its tell, the deleter before its row."""
        name = threading.current_thread().name
        if name == "deleter":
            row_pending.set()
            row_go.wait(WAIT)
        result = transact(work)
        if name == "sender":
            committed.set()
            send_go.wait(WAIT)
        return result

    monkeypatch.setattr(system.internals.store, "transact", paced)
    send = threading.Thread(
        target=_quietly(system.internals.accept, "doomed", "send", ak.user("late"), id="late"),
        name="sender",
    )
    delete = threading.Thread(
        target=_quietly(system.delete, "doomed", timeout_seconds=WAIT), name="deleter"
    )
    try:
        send.start()
        assert committed.wait(WAIT)  # admitted and durable, not yet handed to the agent
        delete.start()
        row_pending.wait(SETTLE)  # at once under the bug: delete found no actor to wait for
        send_go.set()
        send.join(WAIT)
        row_go.set()
        delete.join(WAIT)
        assert "doomed" not in system.internals.live_agents(), (
            "the deleted agent still has an actor"
        )
    finally:
        send_go.set()
        row_go.set()
        system.close(timeout_seconds=WAIT)


def _quietly(action: Callable[..., object], *args: object, **kwargs: object) -> Callable[[], None]:
    def run() -> None:
        try:
            action(*args, **kwargs)
        except ak.AgentkeepError:  # a refusal is a legitimate outcome here
            return

    return run


# -- the mutants ---------------------------------------------------------------------------------


def _first_caught(phrase: str, seeds: Iterable[int]) -> CampaignResult | None:
    """Like :func:`~agentkeep.chaos.first_caught`, but by the mutant's own invariant I25 violation,
    so that an unrelated invariant I25 finding cannot pass for the catch."""
    for seed in seeds:
        result = lifecycle_races(seed)
        if any(v.invariant == 18 and phrase in v.detail for v in result.violations):
            return result
    return None


def test_the_campaign_catches_a_delete_that_does_not_wait_for_the_agent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Mutant: delete stops the agent's actor without waiting for its admitted work, so a
    message accepted before the delete began is left unanswered (invariant I25)."""
    remove = AgentTier.remove

    def hasty(self: AgentTier, agent_id: str, *, timeout_seconds: float | None) -> None:
        remove(self, agent_id, timeout_seconds=0.0)

    monkeypatch.setattr(AgentTier, "remove", hasty)
    caught = _first_caught("delete returned with '", range(30))
    assert caught is not None, "the campaign never noticed a delete that did not wait"


def test_the_campaign_catches_a_close_that_does_not_wait_for_admitted_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Mutant: close neither waits for admitted operations nor for the agents to finish
    them, so it returns with accepted messages unanswered (invariant I25)."""
    close = ak.AgentSystem.close

    def hasty(self: ak.AgentSystem, *, timeout_seconds: float | None = 30.0) -> None:
        close(self, timeout_seconds=0.0)

    monkeypatch.setattr(ak.AgentSystem, "close", hasty)
    caught = _first_caught("close returned with the agent owing", range(30))
    assert caught is not None, "the campaign never noticed a close that did not wait"


# -- the campaign itself -------------------------------------------------------------------------


def test_the_plan_is_a_function_of_the_seed() -> None:
    assert Plan.draw(random.Random(7)) == Plan.draw(random.Random(7))
    plans = {Plan.draw(random.Random(seed)).describe() for seed in range(20)}
    assert len(plans) == 20


def test_the_suite_is_registered_with_its_replay_command() -> None:
    from agentkeep.cli.chaos_suites import suites

    assert SUITES["lifecycle_races"] is lifecycle_races
    suite = suites()["lifecycle_races"]
    assert suite.kind == "in-process"
    outcome = suite.run(3)
    assert outcome.replay == "agentkeep chaos run --suite lifecycle_races --seed 3"
    assert (
        outcome.replay_pytest == "CHAOS_SEED=3 .venv/bin/pytest tests/chaos/test_lifecycle_races.py"
    )
