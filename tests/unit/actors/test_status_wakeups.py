"""``AgentStatus`` wakes its idle waiters exactly once per turn to idle: a change
that leaves the agent busy, or idle, wakes nobody, so a caller in ``wait_for_idle`` is not
switched in (and back out) on every event of a step."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import agentkeep as ak
from agentkeep.actors.status import AgentStatus
from agentkeep.providers import script

TIMEOUT = 10.0


class _CountingCondition(threading.Condition):
    """A condition that counts its wake-ups (``notify_all`` calls ``notify``)."""

    def __init__(self) -> None:
        super().__init__()
        self.wakeups = 0

    def notify(self, n: int = 1) -> None:
        self.wakeups += 1
        super().notify(n)


def _counted(status: AgentStatus) -> _CountingCondition:
    condition = _CountingCondition()
    status._condition = condition  # before anything uses it: nothing holds the old one
    return condition


def test_busy_changes_wake_nobody_and_the_turn_to_idle_wakes_once() -> None:
    status = AgentStatus()
    condition = _counted(status)
    status.signal_sent()
    status.set_running(True)
    status.signal_taken()  # still running: busy
    status.set_running(True)  # another event of the same run
    assert condition.wakeups == 0
    assert not status.idle
    status.set_running(False)  # idle now
    assert condition.wakeups == 1
    status.set_running(False)  # a later event that leaves it idle
    status.signal_taken()  # clamped at zero: still idle
    assert condition.wakeups == 1
    assert status.wait_for_idle(0)


def test_a_signal_taken_last_wakes_the_waiter() -> None:
    status = AgentStatus()
    condition = _counted(status)
    status.signal_sent()
    waiting = threading.Event()
    results: list[bool] = []

    def wait() -> None:
        with condition:  # registered as a waiter before the main thread may go on
            waiting.set()
            results.append(condition.wait_for(status._is_idle, TIMEOUT))

    waiter = threading.Thread(target=wait)
    waiter.start()
    assert waiting.wait(TIMEOUT)
    with condition:  # the waiter is inside wait() now (it released the lock there)
        pass
    status.set_running(False)  # not running, but a signal is still out: busy
    assert condition.wakeups == 0
    status.signal_taken()
    waiter.join(TIMEOUT)
    assert results == [True]
    assert condition.wakeups == 1


def test_a_durable_step_wakes_its_idle_waiter_once(tmp_path: Path) -> None:
    steps = 5
    model = ak.ScriptedModel([script.text("ok") for _ in range(steps)])
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    with ak.AgentSystem.open(
        tmp_path / "state", providers=providers, provider="local", model="gym-1"
    ) as system:
        agent = system.create()
        known: Any = system.internals.agents.get_or_make(agent.id)  # made before its actor exists
        condition = _counted(known.status)
        for n in range(steps):
            agent.send(ak.user(f"step {n}"))
            assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
            assert condition.wakeups == n + 1
        assert len(agent.transcript()) == 2 * steps  # each step: the message and its reply
