"""Injected drivers run their sessions' turns (real drivers, no mocks)."""

from __future__ import annotations

import threading

import pytest

import agentkeep as ak
from agentkeep.drivers import (
    DriverContext,
    DriverContextClosedError,
    DriverResult,
    DriverRunRequest,
)
from agentkeep.sessions import TurnFailure, UnsupportedDriverError

from .conftest import DriverWorld, Gated, Scripted, events, types_of


def _streaming(request: DriverRunRequest, context: DriverContext) -> DriverResult:
    context.delta("Work")
    first = context.emit("progress", {"step": 1})
    assert first.sequence > 0  # committed before emit returned
    context.delta("ing…")
    context.emit("progress", {"step": 2, "nested": {"ok": [1, 2.5, None]}})
    context.emit("message", {"role": "assistant", "parts": [{"type": "text", "text": "mid"}]})
    text = request.input["parts"][0]["text"]
    return DriverResult(
        message={"role": "assistant", "parts": [{"type": "text", "text": f"done: {text}"}]},
        driver_session_id=f"remote-{len(request.history)}",
        metadata={"provider": "example"},
    )


def test_a_streaming_driver_runs_a_turn_and_the_ledger_tells_it(world: DriverWorld) -> None:
    driver = Scripted("remote", _streaming)
    system = world.open([driver])
    session_id = world.session(system, "remote")
    subscription = system.subscribe(session_id, ephemeral=True)

    sent = system.sessions.send(session_id, "first", idempotency_key="k1")
    # (sent.turn is read after the acceptance committed: the runner may have started it.)
    assert (sent.turn.driver, sent.turn.message_id, sent.turn.number) == ("remote", None, 1)
    done = sent.wait(timeout_seconds=10)

    assert done.status == "completed"
    answer = {"role": "assistant", "parts": [{"type": "text", "text": "done: first"}]}
    assert done.result == {
        "message": answer,
        "metadata": {"provider": "example"},
        "driverSessionId": "remote-0",
    }
    ledger = events(system, session_id)
    assert [e.type for e in ledger] == [
        "turn.queued",
        "message.accepted",
        "turn.running",
        "progress",
        "progress",
        "message",
        "message",
        "turn.completed",
    ]
    assert all(e.turn_id == done.id for e in ledger)
    assert [e.sequence for e in ledger] == list(range(1, 9))
    assert ledger[1].data["message"] == {
        "role": "user",
        "parts": [{"type": "text", "text": "first"}],
    }
    assert ledger[3].data == {"step": 1}
    assert ledger[6].data == {"role": "assistant", "message": answer}
    assert system.sessions.get(session_id).driver_session_id == "remote-0"

    # The live subscriber saw the deltas between the durable events, each durable once.
    seen = []
    while len([e for e in seen if not e.ephemeral]) < len(ledger):
        seen.append(subscription.next(timeout_seconds=5))
    subscription.close()
    assert [e.sequence for e in seen if not e.ephemeral] == list(range(1, 9))
    deltas = [e for e in seen if e.ephemeral]
    assert [e.data["text"] for e in deltas] == ["Work", "ing…"]
    assert all(e.type == "text.delta" and e.turn_id == done.id for e in deltas)
    order = [e.type if not e.ephemeral else "delta" for e in seen]
    assert order.index("delta") < order.index("progress")  # published before it committed
    assert all(e.type != "text.delta" for e in ledger)  # never stored

    # The next turn gets the stored driver session id and the first turn as history.
    second = system.sessions.send(session_id, "second").wait(timeout_seconds=10)
    assert second.status == "completed"
    request = driver.requests[1]
    assert request.driver_session_id == "remote-0"
    assert request.history == (
        {"role": "user", "parts": [{"type": "text", "text": "first"}]},
        {"role": "assistant", "parts": [{"type": "text", "text": "mid"}]},
        answer,
    )
    assert request.revision.definition.driver.id == "remote"
    assert request.session.id == session_id
    assert request.turn.status == "running"
    assert request.turn.number == 2
    assert request.input == {"role": "user", "parts": [{"type": "text", "text": "second"}]}
    assert system.sessions.get(session_id).driver_session_id == "remote-3"
    assert system.transcript(session_id) == []  # the native loop never ran


def test_a_driver_that_raises_fails_the_turn(world: DriverWorld) -> None:
    def broken(request: DriverRunRequest, context: DriverContext) -> None:
        context.emit("progress", {"step": 1})
        raise ConnectionError("the remote runtime hung up")

    system = world.open([Scripted("remote", broken)])
    session_id = world.session(system, "remote")
    done = system.sessions.send(session_id, "go").wait(timeout_seconds=10)
    assert done.status == "failed"
    assert done.error == TurnFailure(
        code="driver_error",
        message="the remote runtime hung up",
        details={"type": "ConnectionError"},
    )
    assert types_of(system, session_id)[-2:] == ["progress", "turn.failed"]
    # The session takes the next turn.
    assert system.sessions.send(session_id, "again").turn.number == 2


def test_a_driver_that_outlives_the_turn_timeout_fails_it_and_its_late_emits_are_refused(
    world: DriverWorld,
) -> None:
    late: list[BaseException] = []
    finished = threading.Event()

    def slow(request: DriverRunRequest, context: DriverContext) -> DriverResult:
        context.wait_cancelled(10)  # the timeout fires the signal
        try:
            context.emit("progress", {"late": True})
        except DriverContextClosedError as error:
            late.append(error)
        finally:
            finished.set()
        return DriverResult()

    system = world.open([Scripted("remote", slow)], turn_timeout_seconds=0.3)
    session_id = world.session(system, "remote")
    done = system.sessions.send(session_id, "go").wait(timeout_seconds=10)
    assert done.status == "failed"
    assert done.error is not None
    assert done.error.code == "timeout"
    assert "0.3 s" in done.error.message
    assert finished.wait(5)
    assert len(late) == 1
    assert "progress" not in types_of(system, session_id)


def test_cancel_reaches_a_driver_that_honours_it(world: DriverWorld) -> None:
    driver = Gated("remote", honour=True)
    # A long grace: the run returns well before it, so it is never abandoned here.
    system = world.open([driver], driver_cancel_grace_seconds=30)
    session_id = world.session(system, "remote")
    sent = system.sessions.send(session_id, "long job")
    assert driver.started[0].wait(10)
    assert not driver.contexts[0].cancelled

    cancelled = system.sessions.cancel(session_id)
    assert cancelled.status == "cancelled"
    assert cancelled.error is not None
    assert cancelled.error.code == "cancelled"
    assert driver.returned[0].is_set()  # it returned (raising) before the grace passed
    assert driver.contexts[0].cancelled
    types = [t for t in types_of(system, session_id) if t.startswith("turn.")]
    assert types == ["turn.queued", "turn.running", "turn.cancelling", "turn.cancelled"]
    assert sent.wait(timeout_seconds=1).status == "cancelled"


def test_a_driver_that_ignores_cancel_is_abandoned_after_the_grace(world: DriverWorld) -> None:
    driver = Gated("remote", honour=False)
    world.released.extend(driver.release)
    system = world.open([driver], driver_cancel_grace_seconds=0.2)
    session_id = world.session(system, "remote")
    system.sessions.send(session_id, "stubborn")
    assert driver.started[0].wait(10)

    cancelled = system.sessions.cancel(session_id, timeout_seconds=10)
    assert cancelled.status == "cancelled"
    assert not driver.returned[0].is_set()  # still running: abandoned, not waited for
    with pytest.raises(DriverContextClosedError):
        driver.contexts[0].emit("progress", {"after": "abandon"})
    assert "progress" not in types_of(system, session_id)
    # The session goes on with its next turn while the abandoned run still blocks.
    driver.release[1].set()
    nxt = system.sessions.send(session_id, "next").wait(timeout_seconds=10)
    assert nxt.status == "completed"
    driver.release[0].set()
    assert driver.returned[0].wait(5)
    assert system.sessions.turn(session_id, cancelled.id).status == "cancelled"


def test_a_queued_driver_turn_is_cancelled_without_running(world: DriverWorld) -> None:
    driver = Gated("remote")
    world.released.extend(driver.release)
    system = world.open([driver])
    session_id = world.session(system, "remote")
    first = system.sessions.send(session_id, "one")
    second = system.sessions.send(session_id, "two")
    assert driver.started[0].wait(10)
    cancelled = system.sessions.cancel(session_id, second.turn.id)
    assert cancelled.status == "cancelled"
    assert cancelled.started_at_ms is None
    driver.release[0].set()
    assert first.wait(timeout_seconds=10).status == "completed"
    third = system.sessions.send(session_id, "three")
    driver.release[1].set()
    assert third.wait(timeout_seconds=10).status == "completed"
    assert driver.order == [first.turn.id, third.turn.id]  # the cancelled one never ran


def test_a_repeated_idempotency_key_never_runs_the_driver_twice(world: DriverWorld) -> None:
    driver = Scripted("remote", lambda request, context: None)
    system = world.open([driver])
    session_id = world.session(system, "remote")
    first = system.sessions.send(session_id, "charge card", idempotency_key="order-7")
    first.wait(timeout_seconds=10)
    again = system.sessions.send(session_id, "charge card", idempotency_key="order-7")
    assert again.duplicate
    assert again.turn.id == first.turn.id
    assert again.turn.status == "completed"
    with pytest.raises(ak.IdempotencyConflictError):
        system.sessions.send(session_id, "refund card", idempotency_key="order-7")
    # Across a restart too: keys are never released.
    system.close()
    system = world.open([driver])
    repeat = system.sessions.send(session_id, "charge card", idempotency_key="order-7")
    assert repeat.duplicate
    assert driver.calls == 1
    assert len(system.sessions.turns(session_id)) == 1
    assert types_of(system, session_id).count("message.accepted") == 1


def test_turns_of_one_session_run_one_at_a_time_in_order_while_sessions_run_together(
    world: DriverWorld,
) -> None:
    driver = Gated("remote")
    world.released.extend(driver.release)
    system = world.open([driver])
    a = world.session(system, "remote", "alpha")
    b = world.session(system, "remote", "beta")
    a1 = system.sessions.send(a, "a1")
    a2 = system.sessions.send(a, "a2")
    assert driver.started[0].wait(10)
    b1 = system.sessions.send(b, "b1")
    # b1 runs while a1 still runs: sessions are concurrent.
    assert driver.started[1].wait(10)
    assert driver.order == [a1.turn.id, b1.turn.id]
    assert system.sessions.turn(a, a2.turn.id).status == "queued"  # a2 waits for a1
    driver.release[1].set()
    assert b1.wait(timeout_seconds=10).status == "completed"
    assert system.sessions.turn(a, a2.turn.id).status == "queued"
    driver.release[0].set()
    assert a1.wait(timeout_seconds=10).status == "completed"
    assert driver.started[2].wait(10)
    assert driver.order[2] == a2.turn.id
    driver.release[2].set()
    assert a2.wait(timeout_seconds=10).status == "completed"
    assert driver.max_active == 2
    ledger = [
        (e.type, e.turn_id)
        for e in events(system, a)
        if e.type in ("turn.running", "turn.completed")
    ]
    assert ledger == [
        ("turn.running", a1.turn.id),
        ("turn.completed", a1.turn.id),
        ("turn.running", a2.turn.id),
        ("turn.completed", a2.turn.id),
    ]


def test_agent_system_send_makes_a_driver_turn_and_steering_is_refused(
    world: DriverWorld,
) -> None:
    driver = Scripted("remote", lambda request, context: None)
    system = world.open([driver])
    session_id = world.session(system, "remote")
    delivery = system.send(session_id, ak.user("via the agent API"))
    assert delivery.created
    assert delivery.turn_id is not None
    done = system.sessions.wait(session_id, delivery.turn_id, timeout_seconds=10)
    assert done.status == "completed"
    assert done.result is not None
    assert done.result["message"] is None
    with pytest.raises(ak.InvalidMessageError, match="steering is only for the native"):
        system.sessions.send(session_id, "steer me", delivery="steer")
    with pytest.raises(ak.InvalidMessageError, match="takes no message options"):
        system.send(session_id, ak.user("switch"), model="gym-2")
    assert len(system.sessions.turns(session_id)) == 1
    assert system.state(session_id) == "idle"


def test_unregistered_and_reserved_drivers_are_refused(world: DriverWorld) -> None:
    with pytest.raises(ak.InvalidConfigError, match="reserved id"):
        world.open([Scripted("agentkeep", lambda r, c: None)])
    with pytest.raises(ak.InvalidConfigError, match="given twice"):
        world.open([Scripted("x", lambda r, c: None), Scripted("x", lambda r, c: None)])
    with pytest.raises(ak.InvalidConfigError, match="turn_timeout_seconds"):
        world.open([], turn_timeout_seconds=0)
    system = world.open([Scripted("remote", lambda r, c: None)])
    system.registry.create({"id": "other", "driver": {"id": "elsewhere"}})
    with pytest.raises(UnsupportedDriverError, match='"elsewhere" is not registered'):
        system.sessions.start("other")
    session_id = world.session(system, "remote")
    system.close()
    # Reopened without its driver: the session stays readable, a new turn is refused whole.
    system = world.open([])
    with pytest.raises(UnsupportedDriverError, match='"remote" is not registered'):
        system.sessions.send(session_id, "anyone there?")
    assert system.sessions.turns(session_id) == []
    assert system.events(session_id) == []


def test_the_cancel_intent_is_durable_before_the_signal_fires(world: DriverWorld) -> None:
    holder: list[ak.AgentSystem] = []
    seen: list[str] = []
    started = threading.Event()

    def watcher(request: DriverRunRequest, context: DriverContext) -> None:
        started.set()
        assert context.wait_cancelled(10)
        # What the store says the moment the signal fired.
        seen.append(holder[0].sessions.turn(request.session.id, request.turn.id).status)
        context.raise_if_cancelled()

    system = world.open([Scripted("remote", watcher)])
    holder.append(system)
    session_id = world.session(system, "remote")
    system.sessions.send(session_id, "watch")
    assert started.wait(10)
    assert system.sessions.cancel(session_id).status == "cancelled"
    assert seen == ["cancelling"]


def test_a_queued_turn_of_a_deleted_session_fails_instead_of_wedging_its_runner(
    world: DriverWorld,
) -> None:
    driver = Gated("remote")
    world.released.extend(driver.release)
    system = world.open([driver])
    session_id = world.session(system, "remote")
    first = system.sessions.send(session_id, "one")
    second = system.sessions.send(session_id, "two")
    assert driver.started[0].wait(10)
    system.delete(session_id)
    driver.release[0].set()
    assert first.wait(timeout_seconds=10).status == "completed"
    ended = second.wait(timeout_seconds=10)
    assert ended.status == "failed"
    assert ended.error is not None
    assert ended.error.code == "session_deleted"
    assert len(driver.requests) == 1
    assert system.failure is None
