"""The agent actor's shell does less per step, with the same behaviour: a C mailbox
for the agent and the writer, no condition taken for a status that did not change, one-shot
latches on a lock instead of ``threading.Event``, and no action hook built when no feature
overrides it."""

from __future__ import annotations

import queue
import threading
from pathlib import Path
from typing import Any

import pykka
import pytest

import agentkeep as ak
from agentkeep.actors.agent_actor import AgentActor
from agentkeep.actors.consume_claim import ConsumeClaim
from agentkeep.actors.inference_worker import StreamJob
from agentkeep.actors.latch import Latch
from agentkeep.actors.status import AgentStatus
from agentkeep.actors.supervision.inbox import SimpleInboxMixin
from agentkeep.features import FeatureSet
from agentkeep.persistence.writer import StoreWriter
from agentkeep.providers import script

TIMEOUT = 10.0


def _open(tmp_path: Path, steps: int) -> ak.AgentSystem:
    model = ak.ScriptedModel([script.text("ok") for _ in range(steps)])
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    return ak.AgentSystem.open(
        tmp_path / "state", providers=providers, provider="local", model="gym-1"
    )


def test_the_agent_and_the_writer_take_their_mail_from_a_simple_queue(tmp_path: Path) -> None:
    with _open(tmp_path, 1) as system:
        agent = system.create()
        agent.send(ak.user("hi"))
        assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
        agents = pykka.ActorRegistry.get_by_class(AgentActor)
        writers = pykka.ActorRegistry.get_by_class(StoreWriter)
        assert agents
        assert writers
        for ref in (*agents, *writers):
            assert type(ref.actor_inbox) is queue.SimpleQueue
        assert len(agent.transcript()) == 2


class _Gate(SimpleInboxMixin, pykka.ThreadingActor):
    def __init__(self, entered: threading.Event, gate: threading.Event) -> None:
        super().__init__()
        self.entered = entered
        self.gate = gate
        self.seen: list[Any] = []

    def on_receive(self, message: Any) -> Any:
        if message == "block":
            self.entered.set()
            assert self.gate.wait(TIMEOUT)
        self.seen.append(message)
        return message


def test_a_simple_inbox_keeps_order_and_pykkas_stop_and_teardown() -> None:
    entered, gate = threading.Event(), threading.Event()
    ref = _Gate.start(entered, gate)
    assert type(ref.actor_inbox) is queue.SimpleQueue
    blocked = ref.ask("block", block=False)
    assert entered.wait(TIMEOUT)  # the actor holds "block"; the rest queue behind it
    answers = [ref.ask(n, block=False) for n in range(5)]
    stopped = ref.stop(block=False)
    late = ref.ask("late", block=False)  # queued behind the stop: answered by the teardown
    gate.set()
    assert blocked.get(timeout=TIMEOUT) == "block"
    assert [a.get(timeout=TIMEOUT) for a in answers] == list(range(5))  # in order
    stopped.get(timeout=TIMEOUT)
    with pytest.raises(pykka.ActorDeadError):
        late.get(timeout=TIMEOUT)
    assert ref.actor_stopped.wait(TIMEOUT)


class _CountingCondition(threading.Condition):
    """A condition that counts how often it is taken."""

    def __init__(self) -> None:
        super().__init__()
        self.taken = 0

    def __enter__(self) -> bool:
        self.taken += 1
        return super().__enter__()


def test_set_running_takes_the_condition_only_when_it_changes() -> None:
    status = AgentStatus()
    condition = _CountingCondition()
    status._condition = condition  # before anything uses it
    status.set_running(False)  # unchanged
    assert condition.taken == 0
    status.set_running(True)
    assert condition.taken == 1
    status.set_running(True)  # another event of the same run
    assert condition.taken == 1
    assert not status.idle
    status.set_running(False)
    assert status.wait_for_idle(0)


def test_a_latch_lets_every_waiter_pass_once_set_and_times_out_before() -> None:
    latch = Latch()
    assert not latch.is_set()
    assert latch.wait(0) is False
    assert latch.wait(-1.0) is False
    assert latch.wait(0.01) is False
    passed: list[bool] = []
    ready = threading.Barrier(4)

    def wait() -> None:
        ready.wait(TIMEOUT)
        passed.append(latch.wait(TIMEOUT))

    waiters = [threading.Thread(target=wait) for _ in range(3)]
    for each in waiters:
        each.start()
    ready.wait(TIMEOUT)
    latch.set()
    latch.set()  # a second set does nothing
    for each in waiters:
        each.join(TIMEOUT)
    assert passed == [True, True, True]
    assert latch.is_set()
    assert latch.wait()
    assert latch.wait(0)


def test_a_stream_and_a_claim_are_made_without_a_threading_event() -> None:
    job = StreamJob()
    assert isinstance(job.actor_stopped, Latch)
    assert job.is_alive()
    job.actor_stopped.set()
    assert not job.is_alive()
    claim = ConsumeClaim(offer=None, policy=None)  # type: ignore[arg-type]  # neither is read
    assert isinstance(claim._resolved, Latch)
    assert claim.take()
    claim.resolve("declined")
    assert claim.withdraw() == "declined"


def test_an_action_hook_no_feature_overrides_is_not_run(tmp_path: Path) -> None:
    calls: list[str] = []
    original = FeatureSet.actions

    def counted(self: FeatureSet, hook: str, ctx_for: Any, *args: Any) -> Any:
        calls.append(hook)
        return original(self, hook, ctx_for, *args)

    with _open(tmp_path, 3) as system:
        agent = system.create()
        FeatureSet.actions = counted  # type: ignore[method-assign]
        try:
            for n in range(3):
                agent.send(ak.user(f"step {n}"))
                assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
        finally:
            FeatureSet.actions = original  # type: ignore[method-assign]
        assert len(agent.transcript()) == 6  # each step: its message and the reply
    assert calls == []
