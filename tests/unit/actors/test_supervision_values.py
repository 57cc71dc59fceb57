"""The supervision library's values and schedulers, without actors."""

from __future__ import annotations

import pickle
import threading
from typing import Any

import pykka
import pytest

from agentkeep.actors import supervisor as supervision
from agentkeep.actors.supervisor import (
    Backoff,
    ChildSpec,
    ChildStartError,
    ManualScheduler,
    RestartIntensity,
    SupervisorGaveUpError,
    ThreadScheduler,
    start_supervisor,
)
from agentkeep.errors import AgentkeepError

WAIT_SECONDS = 10.0


def never_started() -> pykka.ActorRef[Any]:
    raise AssertionError("not called")


def test_backoff_doubles_from_the_initial_delay_up_to_the_cap() -> None:
    backoff = Backoff(initial_seconds=0.5, multiplier=2.0, max_seconds=3.0)
    assert [backoff.delay_seconds(n) for n in range(6)] == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]


def test_a_long_storm_does_not_overflow_the_backoff() -> None:
    assert (
        Backoff(initial_seconds=1.0, multiplier=10.0, max_seconds=60.0).delay_seconds(10**6) == 60
    )
    assert Backoff(initial_seconds=0).delay_seconds(5) == 0


@pytest.mark.parametrize(
    "build",
    [
        lambda: ChildSpec(id="", start=never_started),
        lambda: ChildSpec(id="a", start=never_started, restart="sometimes"),  # type: ignore[arg-type]
        lambda: ChildSpec(id="a", start=never_started, shutdown_timeout_seconds=-1),
        lambda: ChildSpec(id="a", start=never_started, shutdown_timeout_seconds=float("inf")),
        lambda: RestartIntensity(max_restarts=-1),
        lambda: RestartIntensity(period_seconds=0),
        lambda: Backoff(initial_seconds=-1),
        lambda: Backoff(multiplier=0.5),
    ],
)
def test_invalid_settings_are_refused_when_built(build: object) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - each case has its own message
        build()  # type: ignore[operator]


def test_an_unknown_strategy_is_refused() -> None:
    with pytest.raises(ValueError, match="strategy"):
        start_supervisor("s", strategy="one_for_all")  # type: ignore[arg-type]


def test_supervision_errors_keep_their_code_and_fields_across_pickling() -> None:
    cause = RuntimeError("boom")
    error = SupervisorGaveUpError("root", "agents", max_restarts=3, period_seconds=5)
    error.__cause__ = cause
    copy = pickle.loads(pickle.dumps(error))
    assert isinstance(copy, SupervisorGaveUpError)
    assert isinstance(copy, AgentkeepError)
    assert (copy.code, copy.supervisor, copy.child_id) == ("supervisor_gave_up", "root", "agents")
    assert str(copy) == str(error)
    start_error = pickle.loads(pickle.dumps(ChildStartError("w", "start raised")))
    assert (start_error.code, start_error.child_id) == ("child_start_failed", "w")


def test_the_public_surface_is_what_the_module_exports() -> None:
    exported = set(supervision.__all__)
    assert {"ChildSpec", "SupervisedActor", "SupervisorRef", "start_supervisor"} <= exported
    assert all(hasattr(supervision, name) for name in exported)
    assert not any(name.startswith("_") for name in exported)


def test_the_thread_scheduler_runs_due_calls_in_order_and_skips_cancelled_ones() -> None:
    scheduler = ThreadScheduler()
    busy, release, done = threading.Event(), threading.Event(), threading.Event()
    ran: list[str] = []

    def first() -> None:
        busy.set()
        assert release.wait(WAIT_SECONDS)
        ran.append("first")

    scheduler.call_later(0, first, purpose="restart")
    assert busy.wait(WAIT_SECONDS)  # the scheduler thread is held inside the first call
    cancelled = scheduler.call_later(0, lambda: ran.append("cancelled"), purpose="restart")
    scheduler.call_later(0, lambda: ran.append("second"), purpose="restart")
    scheduler.call_later(0, done.set, purpose="restart")
    cancelled.cancel()
    release.set()

    assert done.wait(WAIT_SECONDS)
    assert ran == ["first", "second"]
    assert not cancelled.is_pending()


def test_a_failing_scheduled_call_does_not_stop_the_scheduler() -> None:
    scheduler = ThreadScheduler()
    done = threading.Event()

    def fail() -> None:
        raise RuntimeError("bad callback")

    scheduler.call_later(0, fail, purpose="restart")
    scheduler.call_later(0, done.set, purpose="restart")
    assert done.wait(WAIT_SECONDS)


def test_the_manual_scheduler_runs_only_when_told_and_reports_what_was_asked() -> None:
    scheduler = ManualScheduler()
    ran: list[str] = []
    scheduler.call_later(1.5, lambda: ran.append("restart"), purpose="restart")
    scheduler.call_later(5, lambda: ran.append("timeout"), purpose="shutdown_timeout")
    assert ran == []
    assert scheduler.requested_delays() == [1.5]
    assert scheduler.run_pending() == 1
    assert ran == ["restart"]
    assert scheduler.run_pending() == 0
    with pytest.raises(TimeoutError):
        scheduler.wait_for_pending(1, timeout_seconds=0)
    assert len(scheduler.pending(purpose="shutdown_timeout")) == 1
