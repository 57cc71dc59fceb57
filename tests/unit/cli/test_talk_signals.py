"""Ctrl-C in ``agentkeep talk``, on a real child process streaming from a slow local model:
the first SIGINT aborts the turn at once and exits 130 with one line on stderr; a second
exits at once; either way the store is consistent and the agent takes the next message."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.postgres_server import on_sqlite

AGENTKEEP = str(Path(sys.executable).parent / "agentkeep")
# Each stream event of the slow model waits this long: the demo's help answer (two dozen
# words) takes over ten seconds, so a turn that ignored Ctrl-C would be seen.
SLOW_PROVIDERS = """
[providers.slow]
kind = "gym"
class = "demo"
latency_seconds = 0.5
"""
# Ctrl-C must end the process well before the slow answer could have finished.
EXIT_BOUND_SECONDS = 3.0


def start_talk(home: Path, agent_id: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "AGENTKEEP_HOME"}
    return subprocess.Popen(
        [AGENTKEEP, "--home", str(home), "talk", agent_id, "hello there", "--provider", "slow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )


def read_until(child: subprocess.Popen[bytes], marker: bytes, timeout: float = 60) -> bytes:
    """The child's stdout up to ``marker``: the answer has started streaming."""
    assert child.stdout is not None
    seen = b""
    deadline = time.monotonic() + timeout
    while marker not in seen:
        assert time.monotonic() < deadline, seen
        chunk = os.read(child.stdout.fileno(), 4096)
        assert chunk, f"the child closed its stdout first: {seen!r}"
        seen += chunk
    return seen


def interrupt(child: subprocess.Popen[bytes], times: int) -> tuple[int, float, str]:
    started = time.monotonic()
    for _ in range(times):
        child.send_signal(signal.SIGINT)
    try:
        _, stderr = child.communicate(timeout=30)
    finally:
        child.kill()
    return child.returncode, time.monotonic() - started, stderr.decode()


def prepared(invoke: Any, home: Path) -> None:
    assert invoke("session", "start", "--id", "a1").exit_code == 0
    (home / "providers.toml").write_text(SLOW_PROVIDERS)


def quickened(home: Path) -> None:
    # The slow model's pauses were only there to give Ctrl-C a turn to interrupt; the
    # follow-up (which first answers the interrupted question) needs none.
    (home / "providers.toml").write_text(SLOW_PROVIDERS.replace("0.5", "0"))


def state_of(invoke: Any) -> dict[str, Any]:
    result = invoke("session", "show", "a1", json_mode=True)
    assert result.exit_code == 0, result.stderr
    value: dict[str, Any] = json.loads(result.stdout)["runtime"]
    return value


def test_the_first_ctrl_c_aborts_the_turn_and_exits_130_with_one_line(
    invoke: Any, home: Path
) -> None:
    prepared(invoke, home)
    child = start_talk(home, "a1")
    read_until(child, b"assistant: ")
    code, elapsed, stderr = interrupt(child, 1)
    assert code == 130, stderr
    assert elapsed < EXIT_BOUND_SECONDS, elapsed
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith('interrupted: aborted the turn of "a1"')
    # The turn was aborted: nothing owed, queued or pending; the question was kept.
    shown = state_of(invoke)
    assert (shown["state"], shown["owed"], shown["queued"], shown["pending_calls"]) == (
        "idle",
        None,
        [],
        [],
    )
    transcript = json.loads(invoke("session", "transcript", "a1", json_mode=True).stdout)
    assert [m["role"] for m in transcript["messages"]] == ["user"]
    # The agent takes the next message.
    quickened(home)
    answered = invoke("session", "send", "a1", "What is 2 + 3?", "--provider", "demo", "--wait")
    assert answered.exit_code == 0, answered.stderr
    assert answered.stdout.strip() == "2 + 3 = 5."


def test_a_second_ctrl_c_exits_at_once_and_loses_nothing(invoke: Any, home: Path) -> None:
    prepared(invoke, home)
    child = start_talk(home, "a1")
    read_until(child, b"assistant: ")
    code, elapsed, stderr = interrupt(child, 2)
    assert code == 130, stderr
    assert elapsed < EXIT_BOUND_SECONDS, elapsed
    assert len(stderr.splitlines()) == 1, stderr
    # Whether the abort landed or the process ended first, the store is consistent and
    # the message was kept: the agent resumes what it owes and answers the next message.
    quickened(home)
    if on_sqlite():  # db check is SQLite's
        assert invoke("db", "check").exit_code == 0
    transcript = json.loads(invoke("session", "transcript", "a1", json_mode=True).stdout)
    assert transcript["messages"][0]["content"][0]["text"] == "hello there"
    answered = invoke("session", "send", "a1", "What is 4 * 4?", "--provider", "demo", "--wait")
    assert answered.exit_code == 0, answered.stderr
    assert answered.stdout.strip() == "4 * 4 = 16."
    assert state_of(invoke)["state"] == "idle"


SECOND_AFTER_THE_WAIT = """
import signal
from agentkeep.cli.turns import Interrupts

interrupts = Interrupts()
with interrupts.installed():
    signal.raise_signal(signal.SIGINT)  # the first: only counted
    assert interrupts.count == 1
    interrupts.announced = True
# The wait is over and the command is unwinding: a second Ctrl-C still exits at once.
signal.raise_signal(signal.SIGINT)
print("not reached")
"""


def test_a_second_ctrl_c_during_the_teardown_still_exits_130_at_once() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SECOND_AFTER_THE_WAIT], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 130, result.stderr
    assert result.stdout == ""
    assert result.stderr == ""  # no KeyboardInterrupt traceback
