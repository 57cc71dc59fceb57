"""The loop's timers (``actors.loop_timers``): one sweeper thread serves every wait, so the
hold armed and cancelled on every step never starts a thread per step."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pykka

from agentkeep.actors.loop_timers import LoopTimers
from agentkeep.actors.sweeper import Sweeper
from agentkeep.loop.events import TimerFired

TIMEOUT = 10.0


def _threads_started_by(action: Callable[[], None]) -> set[threading.Thread]:
    before = set(threading.enumerate())
    action()
    return set(threading.enumerate()) - before


def _firing(fired: list[str], done: threading.Event | None = None) -> Callable[[str], Any]:
    def fire(name: str) -> Callable[[], None]:
        def call() -> None:
            fired.append(name)
            if done is not None:
                done.set()

        return call

    return fire


def test_a_deadline_fires_and_a_cancelled_one_never_does() -> None:
    fired: list[str] = []
    done = threading.Event()
    sweeper = Sweeper("test-sweeper")
    fire = _firing(fired, done)
    sweeper.schedule("early", 0.02, fire("early"))
    sweeper.cancel("early")
    sweeper.schedule("late", 0.05, fire("late"))  # due after "early" would have been
    assert done.wait(TIMEOUT)
    assert fired == ["late"]
    assert sweeper.pending() == 0


def test_a_sooner_deadline_wakes_a_sweeper_waiting_for_a_later_one() -> None:
    fired: list[str] = []
    done = threading.Event()
    sweeper = Sweeper("test-sweeper")
    fire = _firing(fired, done)
    sweeper.schedule("later", 3600.0, fire("later"))
    sweeper.schedule("sooner", 0.01, fire("sooner"))
    assert done.wait(TIMEOUT), "the sweeper slept through a sooner deadline"
    assert fired == ["sooner"]
    sweeper.cancel("later")


def test_one_thread_serves_every_wait_and_exits_once_none_was_pending_a_while() -> None:
    fired: list[str] = []
    done = threading.Event()
    sweeper = Sweeper("test-sweeper", linger_seconds=0.05)
    fire = _firing(fired, done)
    (thread,) = _threads_started_by(lambda: sweeper.schedule("a", 3600.0, fire("a")))

    def many() -> None:  # the shape of steps: armed, then cancelled by the next event
        for n in range(50):
            sweeper.schedule(n, 3600.0, fire(str(n)))
            sweeper.cancel(n)
        sweeper.cancel("a")

    assert _threads_started_by(many) == set()
    sweeper.schedule("last", 0.0, fire("last"))
    assert done.wait(TIMEOUT)
    thread.join(TIMEOUT)
    assert not thread.is_alive(), "the sweeper outlived its linger"
    assert fired == ["last"]
    # The next wait starts a sweeper again.
    done.clear()
    (again,) = _threads_started_by(lambda: sweeper.schedule("next", 0.0, fire("next")))
    assert done.wait(TIMEOUT)
    again.join(TIMEOUT)
    assert fired == ["last", "next"]


def test_a_failing_wait_does_not_end_the_sweeper() -> None:
    fired: list[str] = []
    done = threading.Event()
    sweeper = Sweeper("test-sweeper")

    def broken() -> None:
        raise RuntimeError("the wait broke")

    sweeper.schedule("broken", 0.0, broken)
    sweeper.schedule("after", 0.02, _firing(fired, done)("after"))
    assert done.wait(TIMEOUT)
    assert fired == ["after"]


class _Recorder(pykka.ThreadingActor):
    """Stands where the agent actor stands: records the timers it is told."""

    def __init__(self, told: threading.Event) -> None:
        super().__init__()
        self._told = told
        self.fired: list[str] = []

    def on_receive(self, message: Any) -> Any:
        if message == "fired":
            return list(self.fired)
        assert isinstance(message, TimerFired)
        self.fired.append(message.timer_id)
        self._told.set()
        return None


def test_an_incarnations_timers_tell_its_actor_unless_cancelled() -> None:
    told = threading.Event()
    actor = _Recorder.start(told)
    sweeper = Sweeper("test-sweeper")
    try:
        timers = LoopTimers(sweeper)
        timers.start(actor, "hold", 0.02)
        timers.cancel("hold")
        timers.start(actor, "backoff", 3600.0)
        timers.start(actor, "retry", 0.05)
        assert told.wait(TIMEOUT)
        assert actor.ask("fired", timeout=TIMEOUT) == ["retry"]
        timers.forget("retry")
        timers.cancel_all()  # the incarnation stops: no wait outlives it
        assert sweeper.pending() == 0
    finally:
        actor.stop()
