"""``--timeout`` bounds every wait for a turn, in every mode: text and JSON,
directly and through a daemon, for ``talk``, ``send --wait`` and ``session send --wait``; a
long wait shows progress on stderr in text mode, streamed or not."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from agentkeep.cli import turn_waiting

# A local model that waits a minute (on its cancel token) before each stream event: a turn
# that cannot end within any test's --timeout.
GLACIAL = """
[providers.glacial]
kind = "gym"
class = "demo"
latency_seconds = 60
"""
DEFINITION = '{"id": "glacier", "name": "Glacier", "model": {"id": "glacial/demo-1"}}'
TIMEOUT = "0.5"
BOUND = 10.0  # seconds: far below a single event of the glacial model

COMMANDS = {
    "talk": ("talk", "glacier", "What is 12 * 7?", "--session", "g1", "--timeout", TIMEOUT),
    "session send --wait": (
        "session",
        "send",
        "g1",
        "What is 12 * 7?",
        "--wait",
        "--timeout",
        TIMEOUT,
    ),
}


def _home(kit: Any, path: Path) -> Path:
    home = kit.make_home(path)
    with (home / "providers.toml").open("a", encoding="utf-8") as handle:
        handle.write(GLACIAL)
    run = kit.invoker(home)
    assert run("agent", "create", "-", stdin=DEFINITION).exit_code == 0
    assert run("session", "start", "glacier", "--id", "g1").exit_code == 0
    return home


@contextmanager
def _mode(kit: Any, home: Path, served: bool) -> Iterator[None]:
    with ExitStack() as stack:
        if served:
            stack.enter_context(kit.daemon_on(home))
        yield
        if served:  # the daemon's turn goes on: cancel it, so the daemon stops at once
            assert kit.invoker(home)("session", "cancel", "g1").exit_code == 0


@pytest.mark.parametrize("served", [False, True], ids=["direct", "served"])
@pytest.mark.parametrize("json_mode", [True, False], ids=["json", "text"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_timeout_bounds_every_wait(
    tmp_path: Path, kit: Any, command: str, json_mode: bool, served: bool
) -> None:
    home = _home(kit, tmp_path / "state")
    run = kit.invoker(home)
    with _mode(kit, home, served):
        started = time.monotonic()
        result = run(*COMMANDS[command], json_mode=json_mode)
        elapsed = time.monotonic() - started
    assert elapsed < BOUND, f"{command} waited {elapsed:.1f}s past --timeout {TIMEOUT}"
    assert result.exit_code == 1, result.stderr
    if json_mode:
        error = json.loads(result.stderr.splitlines()[-1])["error"]
        assert error["code"] == "timeout"
    else:
        assert f"after {TIMEOUT}s" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("served", [False, True], ids=["direct", "served"])
@pytest.mark.parametrize("command", ["talk", "session send --wait"])
def test_a_quiet_streamed_wait_shows_progress(
    tmp_path: Path, kit: Any, monkeypatch: pytest.MonkeyPatch, command: str, served: bool
) -> None:
    """While no block commits, text mode prints the progress line (every PROGRESS_SECONDS;
    shortened here) instead of silence, and still stops at --timeout."""
    monkeypatch.setattr(turn_waiting, "PROGRESS_SECONDS", 0.2)
    home = _home(kit, tmp_path / "state")
    run = kit.invoker(home)
    args = [a if a != TIMEOUT else "2" for a in COMMANDS[command]]
    with _mode(kit, home, served):
        result = run(*args, json_mode=False)
    assert result.exit_code == 1, result.stderr
    progress = [line for line in result.stderr.splitlines() if line.startswith("… turn ")]
    assert progress, result.stderr
    assert all(" is running (" in line or " is queued (" in line for line in progress)
    assert "after 2s" in result.stderr
