"""What an injected driver may not do fails its turn explicitly, writing nothing of it."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from agentkeep.drivers import (
    DriverContext,
    DriverContextClosedError,
    DriverResult,
    DriverRunRequest,
    InvalidDriverEventError,
)

from .conftest import DriverWorld, Gated, Scripted, events, types_of


class _Opaque:
    pass


@pytest.mark.parametrize(
    ("type", "data", "problem"),
    [
        ("progress", {"value": _Opaque()}, "is not JSON"),
        ("progress", [1, 2, 3], "must be a JSON object"),
        ("progress", {"blob": "x" * 2000}, "over max_event_bytes (1024)"),
        ("tool.result", {"ok": True}, "reserved"),
        ("message.accepted", {"ok": True}, "reserved"),
        ("turn.completed", {"ok": True}, '"turn.*" events'),
        ("", {"ok": True}, "non-empty string"),
        ("message", {"role": "user", "parts": []}, 'role "assistant"'),
        ("message", {"role": "assistant", "content": "plain"}, '"parts" list'),
        ("message", {"role": "assistant", "parts": "plain"}, "not an AgentMessage"),
        ("message", {"role": "assistant", "parts": [{"type": "image"}]}, "not an AgentMessage"),
    ],
)
def test_an_invalid_emit_raises_and_fails_the_turn(
    world: DriverWorld, type: str, data: Any, problem: str
) -> None:
    raised: list[BaseException] = []
    after: list[BaseException] = []

    def emitter(request: DriverRunRequest, context: DriverContext) -> DriverResult:
        context.emit("progress", {"fine": True})
        try:
            context.emit(type, data)
        except InvalidDriverEventError as error:
            raised.append(error)
        try:  # the context is closed after an invalid emit: nothing more is written
            context.emit("progress", {"after": True})
        except DriverContextClosedError as error:
            after.append(error)
        return DriverResult(message={"role": "assistant", "parts": []})

    system = world.open([Scripted("remote", emitter)], max_event_bytes=1024)
    session_id = world.session(system, "remote")
    done = system.sessions.send(session_id, "go").wait(timeout_seconds=10)

    assert done.status == "failed"
    assert done.error is not None
    assert done.error.code == "invalid_event"
    assert problem in done.error.message
    assert len(raised) == 1
    assert problem in str(raised[0])
    assert len(after) == 1
    ledger = events(system, session_id)
    assert [e.type for e in ledger] == [
        "turn.queued",
        "message.accepted",
        "turn.running",
        "progress",
        "turn.failed",
    ]
    assert ledger[3].data == {"fine": True}


def test_an_invalid_result_fails_the_turn(world: DriverWorld) -> None:
    def wrong(request: DriverRunRequest, context: DriverContext) -> Any:
        return "not a DriverResult"

    def bad_message(request: DriverRunRequest, context: DriverContext) -> DriverResult:
        return DriverResult(message={"role": "user", "parts": []}, driver_session_id="x")

    system = world.open([Scripted("wrong", wrong), Scripted("bad", bad_message)])
    for driver_id, problem in (
        ("wrong", "must return a DriverResult"),
        ("bad", 'role "assistant"'),
    ):
        session_id = world.session(system, driver_id, name=driver_id)
        done = system.sessions.send(session_id, "go").wait(timeout_seconds=10)
        assert done.status == "failed"
        assert done.error is not None
        assert done.error.code == "invalid_result"
        assert problem in done.error.message
        assert "message" not in types_of(system, session_id)
        assert system.sessions.get(session_id).driver_session_id is None


def test_emit_text_delta_is_ephemeral_like_seed_002(world: DriverWorld) -> None:
    def seedlike(request: DriverRunRequest, context: DriverContext) -> DriverResult:
        event = context.emit("text.delta", {"text": "Working…"})
        assert event.ephemeral
        assert event.sequence == 0
        return DriverResult()

    system = world.open([Scripted("remote", seedlike)])
    session_id = world.session(system, "remote")
    assert system.sessions.send(session_id, "go").wait(timeout_seconds=10).status == "completed"
    assert "text.delta" not in types_of(system, session_id)


def test_closing_the_system_interrupts_a_running_turn_never_replayed(
    world: DriverWorld, tmp_path: Path
) -> None:
    driver = Gated("remote", honour=True)
    system = world.open([driver], driver_cancel_grace_seconds=30)
    session_id = world.session(system, "remote")
    sent = system.sessions.send(session_id, "long")
    assert driver.started[0].wait(10)
    closer = threading.Thread(target=lambda: system.close(timeout_seconds=0.2))
    closer.start()
    closer.join(10)
    assert not closer.is_alive()
    assert driver.returned[0].is_set()  # it honoured the signal the close fired
    system = world.open([driver])
    turn = system.sessions.turn(session_id, sent.turn.id)
    assert turn.status == "interrupted"
    assert turn.error is not None
    assert "closed" in turn.error.message
    assert len(driver.requests) == 1


def test_a_delta_that_is_not_text_fails_the_turn(world: DriverWorld) -> None:
    def wrong(request: DriverRunRequest, context: DriverContext) -> DriverResult:
        with pytest.raises(InvalidDriverEventError, match="must be a string"):
            context.delta(42)  # type: ignore[arg-type]
        return DriverResult()

    system = world.open([Scripted("remote", wrong)])
    session_id = world.session(system, "remote")
    done = system.sessions.send(session_id, "go").wait(timeout_seconds=10)
    assert done.status == "failed"
    assert done.error is not None
    assert done.error.code == "invalid_event"
