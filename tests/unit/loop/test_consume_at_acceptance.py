"""Consume at acceptance: a message sent to an idle agent is accepted and consumed
in one transaction, so a step commits twice — with nothing durable in a different order: the
acceptance is never lost (a consumption that fails falls back to the acceptance alone), the
hooks run where and in the order they always did, and a crash after that transaction resumes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import agentkeep as ak
from agentkeep.chaos.faultpoints import expect_label, find_label, recording_labels
from agentkeep.chaos.ledger_checks import check_events
from agentkeep.chaos.ledger_reads import read_all
from agentkeep.chaos.process import read_durable
from agentkeep.chaos.turn_checks import check_turns
from agentkeep.errors import CommitOutcomeUnknownError
from agentkeep.fault_injection import FaultInjection, FaultPlan
from agentkeep.persistence.interface import Transaction
from agentkeep.providers import script

from .conftest import World, roles, text_of


def ledger_problems(system: ak.AgentSystem, agent_id: str) -> list[str]:
    """The ledger's dense, fact⇔event and turn checks (the chaos checker's L1, L2, T1–T4)."""

    def read(tx: Transaction) -> tuple[Any, Any]:
        events = read_all(lambda after: tx.ledger.events(agent_id, after, 1000))
        return read_durable(tx, agent_id), events

    state, events = system.internals.store.read(read)
    found = check_events(state, events, process=1)
    found += check_turns(state.turns, events, (), process=1, settled=state.owed is None)
    return [f"{v.invariant}: {v.detail}" for v in found]


def consumed_when_sent(system: ak.AgentSystem, agent_id: str, message_id: str) -> tuple[Any, ...]:
    """What is durable about ``message_id``: (queued ids, is it a record, its turn's status)."""

    def read(tx: Transaction) -> tuple[Any, ...]:
        records = tx.records.load(agent_id)
        turn = tx.turns.of_message(agent_id, message_id)
        return (
            [q.id for q in tx.queue.messages(agent_id)],
            any(getattr(r, "message_id", None) == message_id for r in records),
            None if turn is None else turn.status,
        )

    return system.internals.store.read(read)


def test_a_step_to_an_idle_agent_commits_twice(world: World) -> None:
    steps = 5
    world.model.add(*[script.text(f"answer {n}") for n in range(steps + 1)])
    system = world.open()
    agent = system.create()
    agent.send(ak.user("warm up"))
    assert agent.wait_for_idle(timeout_seconds=20)

    before = system.internals.store.statistics().commits
    for n in range(steps):
        deliver = agent.steer if n % 2 else agent.send  # a steer to an idle agent too
        deliver(ak.user(f"step {n}"), id=f"s{n}")
        # Consumed in the acceptance's own transaction: durable in the conversation, its
        # turn running, the moment send returns.
        assert consumed_when_sent(system, agent.id, f"s{n}")[:2] == ([], True)
        assert agent.wait_for_idle(timeout_seconds=20)
    assert system.internals.store.statistics().commits - before == 2 * steps

    transcript = agent.transcript()
    assert roles(transcript) == ["user", "assistant"] * (steps + 1)
    assert text_of(transcript[-1]) == f"answer {steps}"
    assert ledger_problems(system, agent.id) == []


def test_concurrent_sends_to_an_idle_agent_are_each_answered_once(world: World) -> None:
    """Of racing acceptances at most one takes the idle agent's claim; the others queue as
    always, and the run that the taker started picks them up."""
    senders = 4
    world.model.add(*[script.text(f"answer {n}") for n in range(senders + 1)])
    system = world.open()
    agent = system.create()
    agent.send(ak.user("warm up"))
    assert agent.wait_for_idle(timeout_seconds=20)

    barrier = threading.Barrier(senders)
    errors: list[BaseException] = []

    def send(n: int) -> None:
        try:
            barrier.wait(10)
            assert agent.send(ak.user(f"racer {n}"), id=f"r{n}").created
        except BaseException as error:  # reported below, in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=send, args=(n,)) for n in range(senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert errors == []
    assert agent.wait_for_idle(timeout_seconds=20)

    transcript = agent.transcript()
    users = [text_of(m) for m in transcript if roles([m]) == ["user"]]
    assert sorted(users[1:]) == [f"racer {n}" for n in range(senders)]
    assert roles(transcript)[-1] == "assistant"
    assert all(t.status == "completed" for t in system.sessions.turns(agent.id))
    assert ledger_problems(system, agent.id) == []


class Journal(ak.Feature):
    """Records the hooks in the order they run (and on which thread)."""

    name = "journal"

    def __init__(self, *, refuse_once: str | None = None) -> None:
        self.refuse_once = refuse_once
        self.calls: list[str] = []
        self.threads: dict[str, set[str]] = {}
        self.durable: list[bool] = []  # the transactional hook's write, when observed
        self._lock = threading.Lock()

    def _note(self, hook: str) -> None:
        with self._lock:
            self.calls.append(hook)
            self.threads.setdefault(hook, set()).add(threading.current_thread().name)

    def message_accepted_transact(self, ctx: ak.HookContext, accepted: ak.MessageAccepted) -> None:
        ctx.kv.write(f"seen.{accepted.id}", True)  # joins the consuming transaction
        if accepted.id == self.refuse_once:
            self.refuse_once = None
            self._note("message_accepted_transact:refused")
            raise RuntimeError("the journal refuses this one, once")
        self._note("message_accepted_transact")

    def message_accepted(self, ctx: ak.HookContext, accepted: ak.MessageAccepted) -> None:
        self._note("message_accepted")
        self.durable.append(ctx.kv.read(f"seen.{accepted.id}") is True)

    def before_inference(self, ctx: ak.HookContext) -> None:
        self._note("before_inference")

    def after_agent_settled(self, ctx: ak.HookContext, error: str | None) -> None:
        self._note("after_agent_settled")


class LoopJournal(Journal):
    """Also observes the hooks that run before a consumption: no consuming at acceptance."""

    def before_agent_loop(self, ctx: ak.HookContext) -> None:
        self._note("before_agent_loop")

    def before_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> None:
        self._note("before_turn")


def run_two_steps(world: World, journal: Journal) -> tuple[ak.AgentSystem, ak.Agent, int]:
    """A warm-up step, then one measured step; returns the measured step's transactions
    (each committed; a rolled-back one is not counted)."""
    world.model.add(script.text("first"), script.text("second"))
    system = world.open(features=[journal])
    agent = system.create()
    agent.send(ak.user("one"), id="m1")
    assert agent.wait_for_idle(timeout_seconds=20)
    journal.calls.clear()
    before = system.internals.store.statistics().transactions
    delivery = agent.send(ak.user("two"), id="m2")
    assert delivery.created
    assert agent.wait_for_idle(timeout_seconds=20)
    return system, agent, system.internals.store.statistics().transactions - before


def test_the_hooks_run_in_their_order_when_consumed_at_acceptance(world: World) -> None:
    journal = Journal()
    _system, _agent, commits = run_two_steps(world, journal)

    assert commits == 2
    assert journal.calls == [
        "message_accepted_transact",
        "message_accepted",
        "before_inference",
        "after_agent_settled",
    ]
    # The transactional hook still runs in the consuming transaction, on the writer's thread.
    (writer,) = journal.threads["message_accepted_transact"]
    assert writer not in journal.threads["message_accepted"]
    assert journal.durable == [True, True]  # observed only once its transaction committed


def test_hooks_before_the_consumption_keep_it_in_the_run(world: World) -> None:
    """A feature that observes before_agent_loop or before_turn sees them before the message
    is consumed, as always: for its agents, nothing is consumed at acceptance."""
    journal = LoopJournal()
    _system, _agent, commits = run_two_steps(world, journal)

    # The acceptance, the consumption, the reply and (before_turn is an action hook, which
    # may add work after a response) the settlement.
    assert commits == 4
    assert journal.calls == [
        "before_agent_loop",
        "before_turn",
        "message_accepted_transact",
        "message_accepted",
        "before_inference",
        "after_agent_settled",
    ]


def test_a_consumption_that_fails_at_acceptance_loses_nothing(world: World) -> None:
    """The hook refuses the consumption at the acceptance: that whole transaction rolls back,
    the acceptance commits alone, send returns, and the run consumes it as always."""
    journal = Journal(refuse_once="m2")
    system, agent, commits = run_two_steps(world, journal)

    assert journal.calls == [
        "message_accepted_transact:refused",  # in the acceptance's transaction: rolled back
        "message_accepted_transact",  # in the run's consumption
        "message_accepted",
        "before_inference",
        "after_agent_settled",
    ]
    assert commits == 3  # the acceptance alone, the consumption, the reply
    transcript = agent.transcript()
    assert roles(transcript) == ["user", "assistant", "user", "assistant"]
    assert text_of(transcript[-1]) == "second"
    assert [t.status for t in system.sessions.turns(agent.id)] == ["completed", "completed"]
    assert ledger_problems(system, agent.id) == []


def test_an_unknown_commit_outcome_of_a_consuming_acceptance_is_resumed(
    world: World, tmp_path: Path
) -> None:
    """COMMIT of the accept-and-consume transaction landed, but the caller only hears that
    its outcome is unknown: the agent reloads from the store and answers the message once."""
    # A reference run lists the store operations; the fault point is the after-commit of the
    # transaction that accepts (and consumes) m2: the first after_commit after its message id.
    reference = World(tmp_path / "reference")
    reference.model.add(script.text("first"), script.hang())
    with recording_labels() as recording:
        system = reference.open()
        agent = system.create(id="agent1")
        agent.send(ak.user("one"), id="m1")
        assert agent.wait_for_idle(timeout_seconds=20)
        agent.send(ak.user("two"), id="m2")
        labels = list(recording.labels)
    system.close(timeout_seconds=10)
    accepted = find_label(labels, "INSERT OR IGNORE INTO message_ids", nth=2)  # m2's
    after_commit = find_label(labels, "after_commit", after=accepted)
    expect_label(labels, after_commit, "after_commit")

    world.model.add(script.text("first"), script.text("second"))
    faults = FaultInjection(faults=FaultPlan(at=after_commit, mode="flaky"))
    system = world.open(testing=faults)
    agent = system.create(id="agent1")
    agent.send(ak.user("one"), id="m1")
    assert agent.wait_for_idle(timeout_seconds=20)
    with pytest.raises(CommitOutcomeUnknownError):
        agent.send(ak.user("two"), id="m2")
    assert agent.wait_for_idle(timeout_seconds=20)

    assert not agent.send(ak.user("two"), id="m2").created  # it had landed
    assert agent.wait_for_idle(timeout_seconds=20)
    transcript = agent.transcript()
    assert roles(transcript) == ["user", "assistant", "user", "assistant"]
    assert text_of(transcript[-1]) == "second"
    assert ledger_problems(system, agent.id) == []


_CHILD = """
import json, sys
from pathlib import Path
import agentkeep as ak
from agentkeep.providers import script

model = ak.ScriptedModel([script.text("first"), script.hang()])
providers = ak.Providers()
providers.add("local", model, kind="gym")
system = ak.AgentSystem.open(Path(sys.argv[1]), providers=providers, provider="local",
                             model="gym-1")
agent = system.create(id="agent1")
agent.send(ak.user("one"), id="m1")
assert agent.wait_for_idle(timeout_seconds=30)
agent.send(ak.user("two"), id="m2")

def durable(tx):
    turn = tx.turns.of_message("agent1", "m2")
    return [[q.id for q in tx.queue.messages("agent1")], tx.records.count("agent1"), turn.status]

print(json.dumps(system.internals.store.read(durable)), flush=True)
sys.stdin.read()  # the parent kills this process here, its reply never committed
"""


def test_a_process_killed_after_a_consuming_acceptance_answers_on_reopen(
    world: World, tmp_path: Path
) -> None:
    home = world.home
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTKEEP_FAULT_")}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(home)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
    finally:
        os.kill(child.pid, signal.SIGKILL)
        _out, err = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL
    # When send returned, m2 was consumed: no longer queued, its record durable (m1, the
    # answer, m2), its turn running; the reply was never committed.
    assert json.loads(line) == [[], 3, "running"], err[-2000:]

    world.model.add(script.text("second"))
    system = world.open()
    agent = system.resolve("agent1")
    assert agent.wait_for_idle(timeout_seconds=20)
    transcript = agent.transcript()
    assert roles(transcript) == ["user", "assistant", "user", "assistant"]
    assert text_of(transcript[-1]) == "second"
    assert [t.status for t in system.sessions.turns(agent.id)] == ["completed", "completed"]
    assert ledger_problems(system, agent.id) == []


class IdsAfterConsumption(ak.Feature):
    """Records the lifecycle ids (docs/lifecycle.md) of every hook a run consumed at
    acceptance still runs: nothing overrides before_agent_loop or before_turn."""

    name = "ids-after-consumption"

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None, str | None, str | None]] = []

    def _note(self, hook: str, ctx: ak.HookContext) -> None:
        self.seen.append((hook, ctx.loop_id, ctx.turn_id, ctx.inference_id))

    def message_accepted_transact(self, ctx: ak.HookContext, accepted: Any) -> None:
        self._note("message_accepted_transact", ctx)

    def before_inference(self, ctx: ak.HookContext) -> None:
        self._note("before_inference", ctx)

    def after_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> None:
        self._note("after_turn", ctx)

    def after_agent_loop(self, ctx: ak.HookContext) -> None:
        self._note("after_agent_loop", ctx)


def test_a_run_consumed_at_acceptance_tells_its_hooks_one_loop_and_turn(world: World) -> None:
    world.model.add(script.text("a1"), script.text("a2"))
    recorder = IdsAfterConsumption()
    system = world.open(features=[recorder])
    agent = system.create()
    agent.send(ak.user("q1"))
    assert agent.wait_for_idle(timeout_seconds=20)
    first = list(recorder.seen)
    recorder.seen.clear()

    before = system.internals.store.statistics().commits
    agent.send(ak.user("q2"), id="q2")
    assert consumed_when_sent(system, agent.id, "q2")[:2] == ([], True)  # the fast path
    assert agent.wait_for_idle(timeout_seconds=20)
    # The acceptance with its consumption, the reply, and the settlement (which action hooks
    # such as after_agent_loop keep in its own transaction): one fewer than before.
    assert system.internals.store.statistics().commits - before == 3

    for run in (first, recorder.seen):
        assert [hook for hook, *_ in run] == [
            "message_accepted_transact",
            "before_inference",
            "after_turn",
            "after_agent_loop",
        ]
        loops_and_turns = {(loop_id, turn_id) for _, loop_id, turn_id, _ in run}
        assert len(loops_and_turns) == 1
        ((loop_id, turn_id),) = loops_and_turns
        assert loop_id
        assert turn_id
        inference_ids = [i for hook, _, _, i in run if hook == "before_inference"]
        assert inference_ids
        assert all(inference_ids)
    assert first[0][1:3] != recorder.seen[0][1:3], "a new loop gets new ids"
