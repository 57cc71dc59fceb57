"""The shipped process driver runs a command-line harness per turn (real
child processes: the shipped echo harness, and small harness scripts written here)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

import agentkeep as ak
from agentkeep.drivers.process import ProcessDriver

from .conftest import DriverWorld, events, types_of
from .process_helpers import (
    ECHO,
    PYTHON,
    alive,
    echo_definition,
    group_members,
    group_of,
    linux_only,
    text_of,
    wait_until,
)

pytestmark = linux_only


def _session(world: DriverWorld, system: ak.AgentSystem, definition: dict[str, object]) -> str:
    system.registry.create(definition)
    return system.sessions.start(str(definition["id"])).id


def _started(system: ak.AgentSystem, session_id: str, turn_id: str | None = None) -> int:
    """The pid of ``turn_id``'s harness (without it, the session's first), from its
    ``harness.started`` event (waits for it to commit)."""
    subscription = system.subscribe(session_id)
    try:
        while True:
            event = subscription.next(timeout_seconds=30)
            if event.type == "harness.started" and turn_id in (None, event.turn_id):
                return int(event.data["pid"])
    finally:
        subscription.close()


def _harness_gone(system: ak.AgentSystem, session_id: str) -> None:
    """Wait until the session's (first) harness process is gone."""
    pid = _started(system, session_id)
    wait_until(lambda: not alive(pid), what="the harness to be gone")


def _script(tmp_path: Path, name: str, body: str) -> list[str]:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return [PYTHON, str(path)]


_PRELUDE = """
import json, os, sys, time
request = json.load(sys.stdin)
def line(value):
    sys.stdout.write(json.dumps(value) + "\\n")
    sys.stdout.flush()
line({"type": "harness.started", "data": {"pid": os.getpid()}})
"""


def test_the_echo_harness_runs_turns_and_continues_its_session(world: DriverWorld) -> None:
    system = world.open([ProcessDriver()])
    session_id = _session(world, system, echo_definition())

    first = system.sessions.send(session_id, "hello there", idempotency_key="k1").wait(30)
    assert first.status == "completed", first.error
    assert first.result is not None
    assert text_of(first.result["message"]) == "echo: hello there"
    assert first.result["driverSessionId"] == f"echo-{session_id}"
    assert first.result["metadata"] == {"harness": "echo", "historyLength": 0}
    ledger = events(system, session_id)
    started = [e for e in ledger if e.type == "harness.started"]
    assert len(started) == 1
    assert started[0].turn_id == first.id
    pid = started[0].data["pid"]
    assert pid != os.getpid()
    wait_until(lambda: not alive(pid), what="the harness to be gone")
    assert system.sessions.get(session_id).driver_session_id == f"echo-{session_id}"

    second = system.sessions.send(session_id, "again", idempotency_key="k2").wait(30)
    assert second.status == "completed", second.error
    assert second.result is not None
    # The harness got the history (first input and answer) and the driver session id back.
    assert second.result["metadata"] == {"harness": "echo", "historyLength": 2}
    assert second.result["driverSessionId"] == f"echo-{session_id}"
    assert types_of(system, session_id)[-4:] == [
        "turn.running",
        "harness.started",
        "message",
        "turn.completed",
    ]


def test_a_failing_harness_fails_the_turn_with_its_status_and_stderr(world: DriverWorld) -> None:
    system = world.open([ProcessDriver()])
    session_id = _session(world, system, echo_definition(fail="no credentials for the vendor"))
    done = system.sessions.send(session_id, "hi").wait(30)
    assert done.status == "failed"
    assert done.error is not None
    assert done.error.code == "driver_error"
    assert "exited with status 3" in done.error.message
    assert "no credentials for the vendor" in done.error.message
    assert done.error.details == {"type": "ProcessDriverError"}


def test_a_command_that_cannot_run_or_no_command_fails_the_turn(
    world: DriverWorld, tmp_path: Path
) -> None:
    system = world.open([ProcessDriver()])
    missing = _session(world, system, {"id": "missing", "driver": {"id": "process", "config": {}}})
    done = system.sessions.send(missing, "hi").wait(30)
    assert done.status == "failed"
    assert done.error is not None
    assert "needs driver.config.command" in done.error.message

    absent = str(tmp_path / "no-such-harness")
    nowhere = _session(
        world,
        system,
        {"id": "nowhere", "driver": {"id": "process", "config": {"command": [absent]}}},
    )
    done = system.sessions.send(nowhere, "hi").wait(30)
    assert done.status == "failed"
    assert done.error is not None
    assert "status 127" in done.error.message
    assert "cannot run" in done.error.message


def test_a_bad_line_fails_the_turn_and_kills_the_harness(
    world: DriverWorld, tmp_path: Path
) -> None:
    command = _script(
        tmp_path, "bad", _PRELUDE + 'print("not json", flush=True)\ntime.sleep(300)\n'
    )
    system = world.open([ProcessDriver(kill_grace_seconds=5.0)])
    session_id = _session(
        world, system, {"id": "bad", "driver": {"id": "process", "config": {"command": command}}}
    )
    done = system.sessions.send(session_id, "hi").wait(30)
    assert done.status == "failed"
    assert done.error is not None
    assert "bad line (it is not JSON): not json" in done.error.message
    _harness_gone(system, session_id)


def test_an_event_agentkeep_refuses_fails_the_turn_invalid_event(
    world: DriverWorld, tmp_path: Path
) -> None:
    command = _script(
        tmp_path,
        "reserved",
        _PRELUDE + 'line({"type": "turn.completed", "data": {}})\ntime.sleep(300)\n',
    )
    system = world.open([ProcessDriver()])
    session_id = _session(
        world, system, {"id": "res", "driver": {"id": "process", "config": {"command": command}}}
    )
    done = system.sessions.send(session_id, "hi").wait(30)
    assert done.status == "failed"
    assert done.error is not None
    assert done.error.code == "invalid_event"
    _harness_gone(system, session_id)


def _gated_in_a_group(tmp_path: Path, **config: object) -> dict[str, object]:
    """The echo harness behind a FIFO nobody opens, started by a shell that leaves a
    ``sleep`` running in the same process group."""
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    definition = echo_definition("gated", gate=str(gate), **config)
    driver = definition["driver"]
    assert isinstance(driver, dict)
    driver["config"]["command"] = [
        "/bin/sh",
        "-c",
        'sleep 300 & exec "$0" "$1"',
        *driver["config"]["command"],
    ]
    return definition


def test_cancel_kills_the_harness_process_group(world: DriverWorld, tmp_path: Path) -> None:
    system = world.open([ProcessDriver()])
    session_id = _session(world, system, _gated_in_a_group(tmp_path))
    sent = system.sessions.send(session_id, "hi", idempotency_key="c1")
    pid = _started(system, session_id)
    pgid = group_of(pid)
    assert pgid != os.getpgid(0)  # its own group, not the system's
    wait_until(lambda: len(group_members(pgid)) >= 3, what="guard, harness and sleep")

    cancelled = system.sessions.cancel(session_id, sent.turn.id, timeout_seconds=30)

    assert cancelled.status == "cancelled"
    wait_until(lambda: not group_members(pgid), what="the process group to be gone")
    assert "turn.cancelled" in types_of(system, session_id)


def test_timeout_seconds_kills_the_group_and_fails_the_turn(
    world: DriverWorld, tmp_path: Path
) -> None:
    system = world.open([ProcessDriver()])
    session_id = _session(world, system, _gated_in_a_group(tmp_path, timeoutSeconds=0.5))
    done = system.sessions.send(session_id, "hi").wait(30)
    assert done.status == "failed"
    assert done.error is not None
    assert "ran longer than timeoutSeconds (0.5)" in done.error.message
    _harness_gone(system, session_id)


def test_the_system_turn_timeout_and_close_end_the_group(
    world: DriverWorld, tmp_path: Path
) -> None:
    system = world.open([ProcessDriver()], turn_timeout_seconds=0.5)
    session_id = _session(world, system, _gated_in_a_group(tmp_path))
    sent = system.sessions.send(session_id, "hi")
    pid = _started(system, session_id)
    pgid = group_of(pid)
    done = sent.wait(30)
    assert done.status == "failed"
    assert done.error is not None
    assert done.error.code == "timeout"
    wait_until(lambda: not group_members(pgid), what="the process group to be gone")

    # Closing the system while a harness runs: the turn is interrupted, the group ended.
    system.close(timeout_seconds=10)
    system = world.open([ProcessDriver()])
    sent = system.sessions.send(session_id, "again")
    pid = _started(system, session_id, sent.turn.id)
    pgid = group_of(pid)
    system.close(timeout_seconds=0.2)
    wait_until(lambda: not group_members(pgid), what="the process group to be gone")
    system = world.open([ProcessDriver()])
    assert system.sessions.turn(session_id, sent.turn.id).status == "interrupted"


def test_a_driver_with_a_fixed_command_ignores_config_commands(world: DriverWorld) -> None:
    driver = ProcessDriver("echo", command=[PYTHON, ECHO])
    system = world.open([driver])
    session_id = _session(
        world, system, {"id": "fixed", "driver": {"id": "echo", "config": {"command": ["false"]}}}
    )
    done = system.sessions.send(session_id, "fixed").wait(30)
    assert done.status == "completed", done.error
    assert done.result is not None
    assert text_of(done.result["message"]) == "echo: fixed"


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ({"command": "python harness.py"}, "driver.config.command must be a non-empty list"),
        ({"command": []}, "driver.config.command must be a non-empty list"),
        ({"command": ["x"], "env": {"A": 1}}, "driver.config.env must be an object of strings"),
        ({"command": ["x"], "timeoutSeconds": -1}, "timeoutSeconds must be a finite number"),
        ({"command": ["x"], "cwd": 3}, "driver.config.cwd must be a string"),
    ],
)
def test_bad_config_fails_the_turn_naming_the_key(
    world: DriverWorld, config: dict[str, object], problem: str
) -> None:
    system = world.open([ProcessDriver()])
    session_id = _session(
        world, system, {"id": "cfg", "driver": {"id": "process", "config": config}}
    )
    done = system.sessions.send(session_id, "hi").wait(30)
    assert done.status == "failed"
    assert done.error is not None
    assert problem in done.error.message


def test_a_harness_that_ignores_sigterm_is_killed_after_the_grace(
    world: DriverWorld, tmp_path: Path
) -> None:
    command = _script(
        tmp_path,
        "stubborn",
        "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        + _PRELUDE
        + "time.sleep(300)\n",
    )
    system = world.open([ProcessDriver()])
    definition = {
        "id": "stubborn",
        "driver": {"id": "process", "config": {"command": command, "killGraceSeconds": 0.3}},
    }
    session_id = _session(world, system, definition)
    sent = system.sessions.send(session_id, "hi")
    pid = _started(system, session_id)
    pgid = group_of(pid)

    cancelled = system.sessions.cancel(session_id, sent.turn.id, timeout_seconds=30)

    assert cancelled.status == "cancelled"
    wait_until(lambda: not group_members(pgid), what="the process group to be gone")
