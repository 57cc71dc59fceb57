"""Supervision behaviour: restarts, strategies, intensity, backoff, escalation, no deadlocks.

Threads are ordered by events only: a child's journal entry, a child's thread joined (its exit
report is the last thing it does, so afterwards a ``which_children`` call is answered only once
the supervisor handled that exit), the manual scheduler's pending calls. Time is a fake clock.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pykka
import pytest
from structlog.testing import capture_logs

from agentkeep.actors.supervisor import (
    Backoff,
    ChildInfo,
    ChildSpec,
    ChildStartError,
    DuplicateChildError,
    ManualScheduler,
    RestartIntensity,
    RestartType,
    Strategy,
    SupervisedActor,
    SupervisionDeadlockError,
    SupervisorGaveUpError,
    SupervisorRef,
    SupervisorStoppedError,
    UnknownChildError,
    start_supervisor,
)

WAIT_SECONDS = 10.0


class CrashError(Exception):
    """The injected failure."""


class Journal:
    """What the children did, in order, and their threads (to wait for an exit)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self.events: list[tuple[str, str]] = []
        self.threads: dict[str, threading.Thread] = {}

    def record(self, kind: str, name: str) -> None:
        with self._changed:
            self.events.append((kind, name))
            self._changed.notify_all()

    def count(self, kind: str, name: str) -> int:
        with self._changed:
            return self.events.count((kind, name))

    def wait_for(self, kind: str, name: str, *, count: int = 1) -> None:
        with self._changed:
            assert self._changed.wait_for(
                lambda: self.events.count((kind, name)) >= count, WAIT_SECONDS
            ), f"never saw {count} x {(kind, name)}; saw {self.events}"

    def mark(self) -> int:
        with self._changed:
            return len(self.events)

    def since(self, mark: int) -> list[tuple[str, str]]:
        with self._changed:
            return self.events[mark:]


class Worker(SupervisedActor):
    """A child with a little state that can be told to crash, stop, or run a function."""

    def __init__(
        self,
        name: str,
        journal: Journal,
        *,
        fail_on_start: bool = False,
        fail_on_stop: bool = False,
    ) -> None:
        super().__init__()
        self.name = name
        self.journal = journal
        self.fail_on_start = fail_on_start
        self.fail_on_stop = fail_on_stop
        self.value: object = None
        self.on_start_ran = threading.Event()

    def on_start(self) -> None:
        self.journal.threads[self.actor_urn] = threading.current_thread()
        self.journal.record("started", self.name)
        self.on_start_ran.set()
        if self.fail_on_start:
            raise CrashError(f"{self.name} cannot start")

    def on_stop(self) -> None:
        self.journal.record("stopped", self.name)
        if self.fail_on_stop:
            raise CrashError(f"{self.name} failed while stopping")

    def on_failure(self, *exc_info: object) -> None:
        self.journal.record("failed", self.name)

    def on_receive(self, message: Any) -> Any:
        if message == "crash":
            raise CrashError(self.name)
        if message == "get":
            return self.value
        if message == "stop_self":
            self.stop()
            return None
        kind, argument = message
        if kind == "set":
            self.value = argument
            return None
        if kind == "call":
            return argument(self)
        return super().on_receive(message)


class Plain(pykka.ThreadingActor):
    """A child that knows nothing of supervision."""

    def __init__(self, name: str, journal: Journal) -> None:
        super().__init__()
        self.name = name
        self.journal = journal
        self.on_start_ran = threading.Event()

    def on_start(self) -> None:
        self.journal.threads[self.actor_urn] = threading.current_thread()
        self.journal.record("started", self.name)
        self.on_start_ran.set()

    def on_stop(self) -> None:
        self.journal.record("stopped", self.name)

    def on_receive(self, message: Any) -> Any:
        if message == "crash":
            raise CrashError(self.name)
        return None


def started(actor_class: type[Worker | Plain], *args: Any, **options: Any) -> pykka.ActorRef[Any]:
    """Start an actor and return once its ``on_start`` ran, so the journal is in start order."""
    ref = actor_class.start(*args, **options)
    actor = ref._actor_weakref()  # the test's own actor: reaching in is fine here
    assert actor is not None
    assert actor.on_start_ran.wait(WAIT_SECONDS)
    return ref


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def worker(
    journal: Journal,
    name: str,
    restart: RestartType = "permanent",
    *,
    shutdown_timeout_seconds: float | None = 5.0,
    **options: Any,
) -> ChildSpec:
    return ChildSpec(
        id=name,
        start=lambda: started(Worker, name, journal, **options),
        restart=restart,
        shutdown_timeout_seconds=shutdown_timeout_seconds,
    )


def refs(supervisor: SupervisorRef) -> dict[str, pykka.ActorRef[Any]]:
    children = supervisor.which_children(timeout_seconds=WAIT_SECONDS)
    return {c.id: c.actor_ref for c in children if c.actor_ref is not None}


def statuses(supervisor: SupervisorRef) -> dict[str, str]:
    return {c.id: c.status for c in supervisor.which_children(timeout_seconds=WAIT_SECONDS)}


def wait_exit_handled(
    journal: Journal, supervisor: SupervisorRef, ref: pykka.ActorRef[Any]
) -> None:
    """Return once ``supervisor`` has handled the exit of ``ref``'s incarnation."""
    thread = journal.threads[ref.actor_urn]
    thread.join(WAIT_SECONDS)
    assert not thread.is_alive()
    supervisor.which_children(timeout_seconds=WAIT_SECONDS)  # queued after the exit report


def crash_and_wait_restart(journal: Journal, supervisor: SupervisorRef, name: str) -> None:
    starts = journal.count("started", name)
    refs(supervisor)[name].tell("crash")
    journal.wait_for("started", name, count=starts + 1)


@pytest.fixture
def journal() -> Journal:
    return Journal()


@pytest.fixture
def scheduler() -> ManualScheduler:
    return ManualScheduler()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


MakeSupervisor = Callable[..., SupervisorRef]


@pytest.fixture
def make_supervisor(scheduler: ManualScheduler, clock: FakeClock) -> Iterator[MakeSupervisor]:
    started: list[SupervisorRef] = []

    def make(
        name: str,
        children: list[ChildSpec],
        *,
        strategy: Strategy = "one_for_one",
        max_restarts: int = 3,
        period_seconds: float = 10.0,
        backoff: Backoff | None = None,
        **options: Any,
    ) -> SupervisorRef:
        supervisor = start_supervisor(
            name,
            strategy=strategy,
            children=children,
            intensity=RestartIntensity(max_restarts=max_restarts, period_seconds=period_seconds),
            backoff=backoff if backoff is not None else Backoff(initial_seconds=0),
            scheduler=scheduler,
            clock=clock,
            **options,
        )
        started.append(supervisor)
        return supervisor

    yield make
    for supervisor in reversed(started):
        supervisor.stop(timeout_seconds=WAIT_SECONDS)


# -- strategies ----------------------------------------------------------------------------------


def test_one_for_one_restarts_only_the_failed_child_and_the_others_keep_their_state(
    journal: Journal, make_supervisor: MakeSupervisor
) -> None:
    supervisor = make_supervisor("s", [worker(journal, n) for n in "abc"])
    before = refs(supervisor)
    before["a"].ask(("set", "kept by a"))
    before["c"].ask(("set", "kept by c"))

    crash_and_wait_restart(journal, supervisor, "b")

    after = refs(supervisor)
    assert after["a"].actor_urn == before["a"].actor_urn
    assert after["c"].actor_urn == before["c"].actor_urn
    assert after["b"].actor_urn != before["b"].actor_urn
    assert after["a"].ask("get") == "kept by a"
    assert after["c"].ask("get") == "kept by c"
    assert [e for e in journal.events if e[1] != "b"] == [("started", "a"), ("started", "c")]
    assert [c.id for c in supervisor.which_children()] == ["a", "b", "c"]


def test_rest_for_one_restarts_the_failed_child_and_those_after_it_in_order(
    journal: Journal, make_supervisor: MakeSupervisor
) -> None:
    supervisor = make_supervisor("s", [worker(journal, n) for n in "abcd"], strategy="rest_for_one")
    before = refs(supervisor)
    mark = journal.mark()

    crash_and_wait_restart(journal, supervisor, "b")
    journal.wait_for("started", "d", count=2)

    assert journal.since(mark) == [
        ("failed", "b"),
        ("stopped", "d"),  # the later children stop in reverse start order
        ("stopped", "c"),
        ("started", "b"),  # then all come back in start order
        ("started", "c"),
        ("started", "d"),
    ]
    after = refs(supervisor)
    assert after["a"].actor_urn == before["a"].actor_urn
    assert all(after[n].actor_urn != before[n].actor_urn for n in "bcd")
    assert [c.id for c in supervisor.which_children()] == ["a", "b", "c", "d"]


def test_rest_for_one_stops_the_later_children_at_once_and_restarts_after_the_backoff(
    journal: Journal, make_supervisor: MakeSupervisor, scheduler: ManualScheduler
) -> None:
    supervisor = make_supervisor(
        "s",
        [worker(journal, n) for n in "abc"],
        strategy="rest_for_one",
        backoff=Backoff(initial_seconds=2.0),
    )
    old_c = refs(supervisor)["c"]
    refs(supervisor)["b"].tell("crash")
    scheduler.wait_for_pending(1)
    wait_exit_handled(journal, supervisor, old_c)  # c was stopped without waiting for the delay

    assert statuses(supervisor) == {"a": "running", "b": "restarting", "c": "restarting"}
    assert journal.count("started", "b") == 1
    assert scheduler.requested_delays() == [2.0]

    scheduler.run_pending()
    journal.wait_for("started", "c", count=2)
    assert statuses(supervisor) == {"a": "running", "b": "running", "c": "running"}


def test_rest_for_one_does_not_restart_a_temporary_child_after_the_failed_one(
    journal: Journal, make_supervisor: MakeSupervisor
) -> None:
    supervisor = make_supervisor(
        "s",
        [worker(journal, "a"), worker(journal, "t", "temporary"), worker(journal, "c")],
        strategy="rest_for_one",
    )
    crash_and_wait_restart(journal, supervisor, "a")
    journal.wait_for("started", "c", count=2)

    assert [c.id for c in supervisor.which_children()] == ["a", "c"]
    assert journal.count("stopped", "t") == 1
    assert journal.count("started", "t") == 1


# -- restart intensity and escalation -------------------------------------------------------------


def test_failures_within_the_intensity_are_restarted_and_one_more_stops_everything_and_escalates(
    journal: Journal, make_supervisor: MakeSupervisor
) -> None:
    given_up: list[tuple[SupervisorGaveUpError, list[tuple[str, str]]]] = []
    supervisor = make_supervisor(
        "root",
        [worker(journal, n) for n in "abc"],
        max_restarts=2,
        on_give_up=lambda error: given_up.append((error, list(journal.events))),
    )
    crash_and_wait_restart(journal, supervisor, "b")
    crash_and_wait_restart(journal, supervisor, "b")
    last = refs(supervisor)["b"]
    mark = journal.mark()

    with capture_logs() as logs:
        last.tell("crash")
        error = supervisor.wait_for_stop(timeout_seconds=WAIT_SECONDS)

    assert isinstance(error, SupervisorGaveUpError)
    assert (error.supervisor, error.child_id) == ("root", "b")
    assert isinstance(error.__cause__, CrashError)
    assert supervisor.failure is error
    assert not supervisor.is_alive()
    # Every child stopped, in reverse start order (b was already dead), before escalating.
    assert journal.since(mark) == [("failed", "b"), ("stopped", "c"), ("stopped", "a")]
    assert len(given_up) == 1
    assert given_up[0][0] is error
    assert given_up[0][1][-2:] == [("stopped", "c"), ("stopped", "a")]
    assert pykka.ActorRegistry.get_all() == []
    gave_up = [e for e in logs if e["event"] == "supervisor_gave_up"]
    assert gave_up == [
        {
            "event": "supervisor_gave_up",
            "log_level": "error",
            "supervisor": "root",
            "child_id": "b",
            "error": repr(error.__cause__),
        }
    ]
    with pytest.raises(SupervisorStoppedError):
        supervisor.which_children()


def test_failures_spread_wider_than_the_period_never_exhaust_the_intensity(
    journal: Journal, make_supervisor: MakeSupervisor, clock: FakeClock
) -> None:
    supervisor = make_supervisor("s", [worker(journal, "a")], max_restarts=1, period_seconds=5.0)
    for _ in range(4):
        crash_and_wait_restart(journal, supervisor, "a")
        clock.now += 5.0
    assert supervisor.is_alive()
    assert journal.count("started", "a") == 5


def test_zero_max_restarts_gives_up_at_the_first_failure(
    journal: Journal, make_supervisor: MakeSupervisor
) -> None:
    supervisor = make_supervisor("s", [worker(journal, "a")], max_restarts=0)
    refs(supervisor)["a"].tell("crash")
    assert isinstance(supervisor.wait_for_stop(timeout_seconds=WAIT_SECONDS), SupervisorGaveUpError)
    assert journal.count("started", "a") == 1


def test_a_child_supervisor_that_gives_up_is_its_parents_child_failure(
    journal: Journal, make_supervisor: MakeSupervisor
) -> None:
    started_agents: queue.Queue[SupervisorRef] = queue.Queue()

    def start_agents() -> pykka.ActorRef[Any]:
        agents = make_supervisor(
            "agents", [worker(journal, "x"), worker(journal, "y")], max_restarts=1
        )
        started_agents.put(agents)
        return agents.actor_ref

    root = make_supervisor(
        "root",
        [worker(journal, "writer"), ChildSpec(id="agents", start=start_agents)],
        strategy="rest_for_one",
        max_restarts=1,
    )

    def storm(agents: SupervisorRef) -> None:
        crash_and_wait_restart(journal, agents, "x")
        refs(agents)["x"].tell("crash")  # one more than the agent supervisor allows
        error = agents.wait_for_stop(timeout_seconds=WAIT_SECONDS)
        assert isinstance(error, SupervisorGaveUpError)

    storm(started_agents.get(timeout=WAIT_SECONDS))
    second = started_agents.get(timeout=WAIT_SECONDS)  # the root restarted it
    assert refs(root)["agents"].actor_urn == second.actor_ref.actor_urn
    assert statuses(second) == {"x": "running", "y": "running"}
    assert journal.count("started", "writer") == 1  # before it in start order: untouched

    storm(second)
    error = root.wait_for_stop(timeout_seconds=WAIT_SECONDS)
    assert isinstance(error, SupervisorGaveUpError)
    assert (error.supervisor, error.child_id) == ("root", "agents")
    inner = error.__cause__
    assert isinstance(inner, SupervisorGaveUpError)
    assert (inner.supervisor, inner.child_id) == ("agents", "x")
    assert isinstance(inner.__cause__, CrashError)
    assert journal.events[-1] == ("stopped", "writer")
    assert pykka.ActorRegistry.get_all() == []


# -- backoff -------------------------------------------------------------------------------------


def test_restart_delays_grow_exponentially_up_to_the_cap_and_no_real_time_passes(
    journal: Journal, make_supervisor: MakeSupervisor, scheduler: ManualScheduler
) -> None:
    began = time.monotonic()
    supervisor = make_supervisor(
        "s",
        [worker(journal, "a"), worker(journal, "b")],
        max_restarts=10,
        backoff=Backoff(initial_seconds=1.0, multiplier=2.0, max_seconds=5.0),
    )
    for attempt in range(1, 5):
        refs(supervisor)["a"].tell("crash")
        scheduler.wait_for_pending(1)
        # Nothing is started before the scheduler says the delay is over.
        assert statuses(supervisor) == {"a": "restarting", "b": "running"}
        assert journal.count("started", "a") == attempt
        scheduler.run_pending()
        journal.wait_for("started", "a", count=attempt + 1)

    assert scheduler.requested_delays() == [1.0, 2.0, 4.0, 5.0]
    crash_and_wait_restart_after_backoff(journal, supervisor, scheduler, "b")
    assert scheduler.requested_delays()[-1] == 1.0  # per child: b starts from the initial delay
    assert time.monotonic() - began < 5.0  # the 13 s of delays were never slept


def crash_and_wait_restart_after_backoff(
    journal: Journal, supervisor: SupervisorRef, scheduler: ManualScheduler, name: str
) -> None:
    starts = journal.count("started", name)
    refs(supervisor)[name].tell("crash")
    scheduler.wait_for_pending(1)
    scheduler.run_pending()
    journal.wait_for("started", name, count=starts + 1)


def test_the_backoff_starts_over_once_earlier_restarts_leave_the_period(
    journal: Journal, make_supervisor: MakeSupervisor, scheduler: ManualScheduler, clock: FakeClock
) -> None:
    supervisor = make_supervisor(
        "s", [worker(journal, "a")], period_seconds=5.0, backoff=Backoff(initial_seconds=0.5)
    )
    crash_and_wait_restart_after_backoff(journal, supervisor, scheduler, "a")
    crash_and_wait_restart_after_backoff(journal, supervisor, scheduler, "a")
    clock.now += 6.0
    crash_and_wait_restart_after_backoff(journal, supervisor, scheduler, "a")
    assert scheduler.requested_delays() == [0.5, 1.0, 0.5]


# -- restart types, normal stops -----------------------------------------------------------------


def test_a_transient_child_that_stops_itself_is_forgotten_and_that_is_not_a_failure(
    journal: Journal, make_supervisor: MakeSupervisor
) -> None:
    supervisor = make_supervisor("s", [], max_restarts=0)
    with capture_logs() as logs:
        for name in ("p1", "p2", "p3"):  # more normal exits than the intensity allows restarts
            ref = supervisor.start_child(worker(journal, name, "transient"))
            ref.tell("stop_self")  # passivation
            wait_exit_handled(journal, supervisor, ref)

    assert supervisor.which_children() == []
    assert supervisor.is_alive()
    assert [journal.count("started", n) for n in ("p1", "p2", "p3")] == [1, 1, 1]
    events = [e["event"] for e in logs]
    assert events.count("child_exited") == 3
    assert "child_failed" not in events


def test_a_transient_child_that_fails_is_restarted(
    journal: Journal, make_supervisor: MakeSupervisor
) -> None:
    supervisor = make_supervisor("s", [worker(journal, "t", "transient")])
    with capture_logs() as logs:
        crash_and_wait_restart(journal, supervisor, "t")
        refs(supervisor)  # the restart handler has finished and logged
    assert statuses(supervisor) == {"t": "running"}
    events = [(e["event"], e.get("child_id")) for e in logs]
    assert ("child_failed", "t") in events
    assert ("child_restarted", "t") in events


def test_a_temporary_child_is_never_restarted(
    journal: Journal, make_supervisor: MakeSupervisor
) -> None:
    supervisor = make_supervisor("s", [worker(journal, "t", "temporary"), worker(journal, "u")])
    ref = refs(supervisor)["t"]
    ref.tell("crash")
    wait_exit_handled(journal, supervisor, ref)
    assert [c.id for c in supervisor.which_children()] == ["u"]
    assert journal.count("started", "t") == 1


def test_a_permanent_child_that_stops_normally_is_restarted(
    journal: Journal, make_supervisor: MakeSupervisor
) -> None:
    supervisor = make_supervisor("s", [worker(journal, "p")])
    refs(supervisor)["p"].tell("stop_self")
    journal.wait_for("started", "p", count=2)
    assert journal.count("failed", "p") == 0


def test_stopping_the_supervisor_stops_its_children_in_reverse_order_and_is_no_failure(
    journal: Journal, make_supervisor: MakeSupervisor
) -> None:
    supervisor = make_supervisor("s", [worker(journal, n) for n in "abc"])
    supervisor.start_child(worker(journal, "d"))
    mark = journal.mark()
    supervisor.stop(timeout_seconds=WAIT_SECONDS)
    assert journal.since(mark) == [("stopped", n) for n in "dcba"]
    assert supervisor.wait_for_stop(timeout_seconds=0) is None
    assert supervisor.failure is None
    assert pykka.ActorRegistry.get_all() == []


# -- dynamic children ----------------------------------------------------------------------------


def test_children_can_be_started_and_terminated_at_run_time(
    journal: Journal, make_supervisor: MakeSupervisor
) -> None:
    supervisor = make_supervisor("s", [worker(journal, "a")], max_restarts=0)
    b = supervisor.start_child(worker(journal, "b", "transient"))
    c = supervisor.start_child(worker(journal, "c"))

    children = supervisor.which_children()
    assert children[1] == ChildInfo(id="b", actor_ref=b, restart="transient", status="running")
    assert [x.id for x in children] == ["a", "b", "c"]

    supervisor.terminate_child("b", timeout_seconds=WAIT_SECONDS)
    assert journal.count("stopped", "b") == 1
    assert not b.is_alive()
    supervisor.terminate_child("c", timeout_seconds=WAIT_SECONDS)  # permanent, yet not restarted
    assert [x.id for x in supervisor.which_children()] == ["a"]
    assert journal.count("started", "c") == 1
    assert supervisor.is_alive()  # a terminate is no failure, even with max_restarts=0
    assert c.is_alive() is False


def test_dynamic_children_errors_are_the_callers_and_cost_no_restart(
    journal: Journal, make_supervisor: MakeSupervisor
) -> None:
    supervisor = make_supervisor("s", [worker(journal, "a")], max_restarts=0)
    with pytest.raises(DuplicateChildError):
        supervisor.start_child(worker(journal, "a"))
    with pytest.raises(UnknownChildError):
        supervisor.terminate_child("nobody")

    def broken() -> pykka.ActorRef[Any]:
        raise CrashError("cannot build")

    with pytest.raises(ChildStartError) as raised:
        supervisor.start_child(ChildSpec(id="broken", start=broken))
    assert isinstance(raised.value.__cause__, CrashError)
    with pytest.raises(ChildStartError, match=r"not a pykka\.ActorRef"):
        supervisor.start_child(ChildSpec(id="odd", start=lambda: "not a ref"))  # type: ignore[arg-type,return-value]
    assert [x.id for x in supervisor.which_children()] == ["a"]
    assert supervisor.is_alive()


def test_a_child_that_cannot_start_at_first_fails_the_supervisor_start_and_stops_the_others(
    journal: Journal, make_supervisor: MakeSupervisor
) -> None:
    def broken() -> pykka.ActorRef[Any]:
        raise CrashError("cannot build")

    with pytest.raises(ChildStartError):
        make_supervisor("s", [worker(journal, "a"), ChildSpec(id="b", start=broken)])
    assert journal.events == [("started", "a"), ("stopped", "a")]
    assert pykka.ActorRegistry.get_all() == []
    with pytest.raises(DuplicateChildError):
        make_supervisor("s", [worker(journal, "c"), worker(journal, "c")])
    assert journal.events[2:] == [("started", "c"), ("stopped", "c")]
    assert pykka.ActorRegistry.get_all() == []


def test_a_restart_that_cannot_start_counts_as_another_failure(
    journal: Journal, make_supervisor: MakeSupervisor
) -> None:
    attempts: list[int] = []

    def flaky() -> pykka.ActorRef[Any]:
        attempts.append(1)
        if len(attempts) in (2, 3):  # the first two restarts cannot start
            raise CrashError("not yet")
        return started(Worker, "f", journal)

    supervisor = make_supervisor("s", [ChildSpec(id="f", start=flaky)], max_restarts=3)
    refs(supervisor)["f"].tell("crash")
    journal.wait_for("started", "f", count=2)
    assert len(attempts) == 4
    assert supervisor.is_alive()

    refs(supervisor)["f"].tell("crash")  # a fourth restart in the period: too many
    assert isinstance(supervisor.wait_for_stop(timeout_seconds=WAIT_SECONDS), SupervisorGaveUpError)


# -- what counts as an exit (pins pykka behaviour the mixin relies on) -----------------------------


def test_a_child_whose_on_start_fails_is_restarted(
    journal: Journal, make_supervisor: MakeSupervisor
) -> None:
    incarnations: list[int] = []

    def start() -> pykka.ActorRef[Any]:
        incarnations.append(1)
        return started(Worker, "w", journal, fail_on_start=len(incarnations) == 2)

    supervisor = make_supervisor("s", [ChildSpec(id="w", start=start)])
    crash_and_wait_restart(journal, supervisor, "w")  # the second incarnation fails in on_start
    journal.wait_for("started", "w", count=3)
    assert statuses(supervisor) == {"w": "running"}


def test_a_transient_child_whose_on_stop_fails_is_restarted(
    journal: Journal, make_supervisor: MakeSupervisor
) -> None:
    incarnations: list[int] = []

    def start() -> pykka.ActorRef[Any]:
        incarnations.append(1)
        return started(Worker, "w", journal, fail_on_stop=len(incarnations) == 1)

    supervisor = make_supervisor("s", [ChildSpec(id="w", start=start, restart="transient")])
    refs(supervisor)["w"].tell("stop_self")
    journal.wait_for("started", "w", count=2)


def test_an_exception_returned_to_an_asker_is_not_an_exit(
    journal: Journal, make_supervisor: MakeSupervisor
) -> None:
    supervisor = make_supervisor("s", [worker(journal, "w")], max_restarts=0)
    ref = refs(supervisor)["w"]

    def fail(_: Worker) -> None:
        raise CrashError("for the asker")

    with pytest.raises(CrashError):
        ref.ask(("call", fail))
    assert ref.is_alive()
    assert refs(supervisor)["w"].actor_urn == ref.actor_urn
    assert supervisor.is_alive()


def test_the_exit_is_reported_after_the_old_incarnation_ran_its_last_hook(
    journal: Journal, make_supervisor: MakeSupervisor
) -> None:
    supervisor = make_supervisor("s", [worker(journal, "w")])
    crash_and_wait_restart(journal, supervisor, "w")
    assert journal.events == [("started", "w"), ("failed", "w"), ("started", "w")]


def test_a_plain_pykka_actor_is_supervised_too_and_any_unasked_exit_counts_as_abnormal(
    journal: Journal, make_supervisor: MakeSupervisor
) -> None:
    supervisor = make_supervisor(
        "s",
        [
            ChildSpec(id="plain", start=lambda: started(Plain, "plain", journal)),
            ChildSpec(
                id="other", start=lambda: started(Plain, "other", journal), restart="transient"
            ),
        ],
    )
    crash_and_wait_restart(journal, supervisor, "plain")
    refs(supervisor)["other"].stop()  # pykka keeps no exit reason: a transient plain restarts
    journal.wait_for("started", "other", count=2)
    supervisor.terminate_child("other", timeout_seconds=WAIT_SECONDS)
    assert [c.id for c in supervisor.which_children()] == ["plain"]
    assert journal.count("started", "other") == 2


# -- no deadlocks --------------------------------------------------------------------------------


def test_a_child_asking_its_supervisor_while_being_stopped_for_a_restart_is_answered(
    journal: Journal, make_supervisor: MakeSupervisor, scheduler: ManualScheduler
) -> None:
    supervisor = make_supervisor(
        "s",
        [worker(journal, "a"), worker(journal, "b", shutdown_timeout_seconds=60.0)],
        strategy="rest_for_one",
    )
    entered, release = threading.Event(), threading.Event()
    answers: list[list[ChildInfo]] = []

    def ask_supervisor_later(_: Worker) -> None:
        entered.set()
        assert release.wait(WAIT_SECONDS)
        answers.append(supervisor.which_children(timeout_seconds=WAIT_SECONDS))

    refs(supervisor)["b"].tell(("call", ask_supervisor_later))
    assert entered.wait(WAIT_SECONDS)
    refs(supervisor)["a"].tell("crash")  # the supervisor now stops b, which is busy
    # The supervisor has asked b to stop (and armed b's shutdown timeout, never fired here).
    scheduler.wait_for_pending(1, purpose="shutdown_timeout")
    release.set()  # b asks its supervisor, which must answer while it waits for b to stop

    journal.wait_for("started", "b", count=2)
    assert [{c.id: c.status for c in answer} for answer in answers] == [
        {"a": "restarting", "b": "stopping"}  # answered mid-restart
    ]
    assert statuses(supervisor) == {"a": "running", "b": "running"}


def test_stopping_the_supervisor_releases_a_child_waiting_on_it(
    journal: Journal, make_supervisor: MakeSupervisor, scheduler: ManualScheduler
) -> None:
    supervisor = make_supervisor(
        "s",
        [
            worker(journal, "stuck", shutdown_timeout_seconds=60.0),
            worker(journal, "waiter", shutdown_timeout_seconds=None),
        ],
    )
    entered, release = threading.Event(), threading.Event()
    outcome: list[BaseException] = []

    def block(_: Worker) -> None:
        entered.set()
        assert release.wait(WAIT_SECONDS)

    def terminate_stuck(_: Worker) -> None:
        try:
            supervisor.terminate_child("stuck", timeout_seconds=WAIT_SECONDS)
        except SupervisorStoppedError as error:
            outcome.append(error)

    refs(supervisor)["stuck"].tell(("call", block))
    assert entered.wait(WAIT_SECONDS)
    refs(supervisor)["waiter"].tell(("call", terminate_stuck))  # waits for stuck to stop
    # The supervisor asked stuck to stop (and armed its shutdown timeout, which never fires).
    scheduler.wait_for_pending(1, purpose="shutdown_timeout")

    stopper = threading.Thread(target=supervisor.stop, kwargs={"timeout_seconds": WAIT_SECONDS})
    stopper.start()
    journal.wait_for("stopped", "waiter")  # released with an error, so it could stop
    assert len(outcome) == 1
    release.set()
    stopper.join(WAIT_SECONDS)
    assert not stopper.is_alive()
    assert journal.count("stopped", "stuck") == 1


def test_a_late_exit_of_an_incarnation_given_up_on_is_ignored(
    journal: Journal, make_supervisor: MakeSupervisor, scheduler: ManualScheduler
) -> None:
    supervisor = make_supervisor(
        "s",
        [worker(journal, "a"), worker(journal, "slow", shutdown_timeout_seconds=3.0)],
        strategy="rest_for_one",
    )
    entered, release = threading.Event(), threading.Event()

    def block(_: Worker) -> None:
        entered.set()
        assert release.wait(WAIT_SECONDS)

    old_slow = refs(supervisor)["slow"]
    old_slow.tell(("call", block))
    assert entered.wait(WAIT_SECONDS)
    with capture_logs() as logs:
        refs(supervisor)["a"].tell("crash")
        (timeout,) = scheduler.wait_for_pending(1, purpose="shutdown_timeout")
        assert timeout.delay_seconds == 3.0
        scheduler.run_pending(purpose="shutdown_timeout")  # slow never stopped in time
        journal.wait_for("started", "slow", count=2)
    assert "child_shutdown_timed_out" in [e["event"] for e in logs]
    current = refs(supervisor)

    release.set()
    wait_exit_handled(journal, supervisor, old_slow)
    assert refs(supervisor) == current
    assert journal.count("started", "slow") == 2


def test_calling_the_supervisor_from_a_child_start_fails_instead_of_deadlocking(
    journal: Journal, make_supervisor: MakeSupervisor
) -> None:
    holder: list[SupervisorRef] = []

    def start() -> pykka.ActorRef[Any]:
        holder[0].which_children()
        return started(Worker, "w", journal)

    supervisor = make_supervisor("s", [])
    holder.append(supervisor)
    with pytest.raises(ChildStartError) as raised:
        supervisor.start_child(ChildSpec(id="w", start=start))
    assert isinstance(raised.value.__cause__, SupervisionDeadlockError)


def test_a_child_can_start_a_sibling_and_stop_its_whole_tree_without_deadlock(
    journal: Journal, make_supervisor: MakeSupervisor
) -> None:
    supervisor = make_supervisor("s", [worker(journal, "a", shutdown_timeout_seconds=None)])
    a = refs(supervisor)["a"]

    sibling = a.ask(("call", lambda _: supervisor.start_child(worker(journal, "b"))), block=True)
    assert refs(supervisor)["b"].actor_urn == sibling.actor_urn

    def stop_everything(_: Worker) -> None:
        supervisor.stop()  # from inside the tree: asks, and returns at once

    mark = journal.mark()
    a.tell(("call", stop_everything))
    assert supervisor.wait_for_stop(timeout_seconds=WAIT_SECONDS) is None
    assert journal.since(mark) == [("stopped", "b"), ("stopped", "a")]


def test_calls_that_would_wait_on_the_caller_are_refused(
    journal: Journal, make_supervisor: MakeSupervisor
) -> None:
    agents: queue.Queue[SupervisorRef] = queue.Queue()

    def start_agents() -> pykka.ActorRef[Any]:
        started = make_supervisor("agents", [worker(journal, "x")])
        agents.put(started)
        return started.actor_ref

    root = make_supervisor("root", [ChildSpec(id="agents", start=start_agents)])
    inner = agents.get(timeout=WAIT_SECONDS)
    x = refs(inner)["x"]

    def refused(call: Callable[[], object]) -> Callable[[Worker], str]:
        def attempt(_: Worker) -> str:
            with pytest.raises(SupervisionDeadlockError) as raised:
                call()
            return raised.value.code

        return attempt

    assert x.ask(("call", refused(lambda: inner.terminate_child("x")))) == "supervision_deadlock"
    assert x.ask(("call", refused(lambda: root.terminate_child("agents")))) == (
        "supervision_deadlock"
    )
    assert x.ask(("call", refused(lambda: root.wait_for_stop()))) == "supervision_deadlock"
    assert statuses(root) == {"agents": "running"}
    assert statuses(inner) == {"x": "running"}


def test_a_writer_failure_restarts_the_agent_supervisor_after_it_with_its_agents(
    journal: Journal, make_supervisor: MakeSupervisor
) -> None:
    started_agents: queue.Queue[SupervisorRef] = queue.Queue()

    def start_agents() -> pykka.ActorRef[Any]:
        agents = make_supervisor("agents", [worker(journal, "x"), worker(journal, "y")])
        started_agents.put(agents)
        return agents.actor_ref

    system = make_supervisor(
        "system",
        [
            worker(journal, "writer"),
            ChildSpec(id="agents", start=start_agents, shutdown_timeout_seconds=None),
        ],
        strategy="rest_for_one",
    )
    first = started_agents.get(timeout=WAIT_SECONDS)
    mark = journal.mark()

    crash_and_wait_restart(journal, system, "writer")
    second = started_agents.get(timeout=WAIT_SECONDS)

    assert first.wait_for_stop(timeout_seconds=WAIT_SECONDS) is None  # stopped, not failed
    assert journal.since(mark) == [
        ("failed", "writer"),
        ("stopped", "y"),
        ("stopped", "x"),
        ("started", "writer"),
        ("started", "x"),
        ("started", "y"),
    ]
    assert refs(system)["agents"].actor_urn == second.actor_ref.actor_urn
    assert statuses(second) == {"x": "running", "y": "running"}


def test_stopping_a_supervisor_cancels_the_restarts_it_still_owed(
    journal: Journal, make_supervisor: MakeSupervisor, scheduler: ManualScheduler
) -> None:
    supervisor = make_supervisor(
        "s", [worker(journal, "a"), worker(journal, "b")], backoff=Backoff(initial_seconds=1.0)
    )
    refs(supervisor)["a"].tell("crash")
    scheduler.wait_for_pending(1)
    supervisor.stop(timeout_seconds=WAIT_SECONDS)

    assert scheduler.pending() == []
    assert scheduler.run_pending() == 0
    assert journal.count("started", "a") == 1
    assert pykka.ActorRegistry.get_all() == []
