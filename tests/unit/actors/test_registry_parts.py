"""The registry's owners, each held to the contract its docstring states: the events held
for a restarting agent (``HeldEvents``), the known agents and the idle accounting across
them (``AgentDirectory``), and the idle-grace timers (``PassivationTimers``)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

import agentkeep as ak
from agentkeep.actors.directory import AgentDirectory, KnownAgent
from agentkeep.actors.held_events import HeldEvent, HeldEvents
from agentkeep.actors.passivation import PassivationTimers
from agentkeep.actors.status import AgentStatus

TIMEOUT = 10.0


def test_events_put_back_go_ahead_of_those_held_since() -> None:
    held = HeldEvents()
    held.hold("a", "first", counted=True)
    held.hold("a", "second", counted=False)
    taken = held.take("a")
    assert taken == [HeldEvent("first", True), HeldEvent("second", False)]
    assert not held.waiting("a")
    held.hold("a", "third", counted=True)  # told while the first two were on their way
    held.put_back("a", taken[1:])  # the actor died before it took "second"
    assert held.take("a") == [HeldEvent("second", False), HeldEvent("third", True)]


def test_held_events_are_per_agent_and_dropped_for_a_removed_agent() -> None:
    held = HeldEvents()
    held.hold("a", "for a", counted=True)
    held.hold("b", "for b", counted=True)
    assert held.agent_ids() == {"a", "b"}
    held.drop("a")
    assert held.agent_ids() == {"b"}
    held.clear()
    assert held.take("b") == []


def _directory(system: ak.AgentSystem) -> AgentDirectory:
    """A directory over the system's real agent factory (it reads the agents' rows)."""
    return AgentDirectory(system.internals.make_agent, on_stopped=lambda agent_id, settled: None)


def test_an_agent_becomes_known_once_and_a_stranger_never(system: ak.AgentSystem) -> None:
    directory = _directory(system)
    agent = system.create(id="known")
    assert directory.known(agent.id) is None  # nothing asked about it yet
    first = directory.get_or_make(agent.id)
    assert directory.get_or_make(agent.id) is first
    assert first.status.idle
    with pytest.raises(ak.UnknownAgentError):
        directory.get_or_make("stranger")
    assert directory.known("stranger") is None
    directory.forget(agent.id)
    assert directory.known(agent.id) is None


def test_two_threads_making_one_agent_share_one_status(system: ak.AgentSystem) -> None:
    """The factory runs outside the directory's lock; the first entry in wins, so an agent
    never has two statuses (a waiter on one would miss the other's work)."""
    agent = system.create(id="raced")
    entered, release = threading.Event(), threading.Event()
    made: list[KnownAgent] = []

    def slow_make(
        agent_id: str, *, status: AgentStatus, on_stopped: Callable[[str, bool], None]
    ) -> KnownAgent:
        known = system.internals.make_agent(agent_id, status=status, on_stopped=on_stopped)
        if not made:
            made.append(known)
            entered.set()
            assert release.wait(TIMEOUT)
        return known

    directory = AgentDirectory(slow_make, on_stopped=lambda agent_id, settled: None)
    results: list[KnownAgent] = []
    slow = threading.Thread(target=lambda: results.append(directory.get_or_make(agent.id)))
    slow.start()
    assert entered.wait(TIMEOUT)  # the slow maker has made its entry, not yet put it in
    fast = directory.get_or_make(agent.id)
    release.set()
    slow.join(TIMEOUT)
    assert results == [fast]
    assert made[0] is not fast  # the slow one's entry lost and was dropped


def test_a_writer_failure_keeps_every_agent_busy_until_the_tier_starts_over(
    system: ak.AgentSystem,
) -> None:
    directory = _directory(system)
    before = directory.get_or_make(system.create(id="before").id)
    directory.hold_all_for_restart()
    during = directory.get_or_make(system.create(id="during").id)  # made while restarting
    assert [before.status.idle, during.status.idle] == [False, False]
    precounted = directory.start_over_all(owed={"during"})
    assert precounted == {"during"}
    # The owed agent's Start is counted: its waiters wait for it; the other is idle.
    assert [before.status.idle, during.status.idle] == [True, False]
    during.status.signal_taken()
    assert during.status.idle


def test_closing_fails_pending_compactions_and_releases_waiters(system: ak.AgentSystem) -> None:
    directory = _directory(system)
    known = directory.get_or_make(system.create(id="closing").id)
    compaction = known.status.add_compaction_waiter()
    known.status.signal_sent()
    directory.close_all()
    assert known.status.idle
    with pytest.raises(ak.CompactionFailedError, match="closed before the compaction ran"):
        compaction.result(TIMEOUT)


def _timer_started_by(action: Callable[[], None]) -> threading.Thread:
    before = set(threading.enumerate())
    action()
    (started,) = set(threading.enumerate()) - before
    return started


def test_a_timer_fires_passivate_with_its_agent_id() -> None:
    fired: list[str] = []
    done = threading.Event()

    def passivate(agent_id: str) -> None:
        fired.append(agent_id)
        done.set()

    PassivationTimers(0.0, passivate).schedule("a")
    assert done.wait(TIMEOUT)
    assert fired == ["a"]


def test_a_rescheduled_or_cancelled_timer_never_fires() -> None:
    fired: list[str] = []
    timers = PassivationTimers(3600.0, fired.append)
    timers.schedule("a")
    timers.schedule("a")  # replaces the first deadline
    assert timers.pending() == ["a"]
    timers.cancel("a")
    assert timers.pending() == []
    timers.schedule("b")
    timers.cancel_all()
    assert timers.pending() == []
    assert fired == []


def test_one_sweeper_thread_serves_every_agent_and_exits_when_none_waits() -> None:
    # A threading.Timer per settlement started a thread on every step.
    fired: list[str] = []
    timers = PassivationTimers(3600.0, fired.append)
    sweeper = _timer_started_by(lambda: timers.schedule("a"))
    before = set(threading.enumerate())
    for agent_id in ("b", "c", "d", "a"):
        timers.schedule(agent_id)
    assert set(threading.enumerate()) - before == set()
    assert timers.pending() == ["a", "b", "c", "d"]
    timers.cancel_all()
    sweeper.join(TIMEOUT)
    assert not sweeper.is_alive(), "the sweeper outlived the last deadline"
    assert fired == []


def test_agents_due_together_are_all_passivated() -> None:
    fired: list[str] = []
    done = threading.Event()

    def passivate(agent_id: str) -> None:
        fired.append(agent_id)
        if len(fired) == 3:
            done.set()

    timers = PassivationTimers(0.0, passivate)
    for agent_id in ("a", "b", "c"):
        timers.schedule(agent_id)
    assert done.wait(TIMEOUT)
    assert sorted(fired) == ["a", "b", "c"]
