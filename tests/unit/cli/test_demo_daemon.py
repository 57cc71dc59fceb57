"""``agentkeep demo --daemon``: run for real (it starts, SIGKILLs and restarts ``agentkeep serve``
as processes) it passes every check; and its checks fail on a broken resume — a gap, a
duplicate, a reordering, an interrupted turn, a second turn for the same key."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from agentkeep.cli import cli
from agentkeep.cli.demo_daemon_verify import Observed, judge, stream_problems

CHECKS = (
    "stream_exactly_once",
    "killed_mid_turn",
    "resumed_not_interrupted",
    "idempotent_resend",
    "clean_stop",
)


def test_the_demo_passes_as_a_real_process(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k != "AGENTKEEP_HOME"}
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "agentkeep.cli", "demo", "--daemon", "--dir", str(home)],
        capture_output=True,
        text=True,
        env=env,
        timeout=40,
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    passes = [line.strip() for line in out.splitlines() if line.strip().startswith("PASS")]
    assert len(passes) == len(CHECKS), out
    assert "FAIL" not in out
    assert "demo --daemon: PASS" in out
    assert "exactly once, in order, no gap" in passes[0]
    # The kill came from the stream, then a restart, then a resume from the last id.
    kill = out.index("✗ SIGKILL → daemon pid")
    restart = out.index("5. Restart the daemon")
    resumed = re.search(r"Reconnect with Last-Event-ID: (\d+)", out)
    assert resumed is not None, out
    assert kill < restart < resumed.start(), out
    pids = re.findall(r"^   pid (\d+), listening", out, re.MULTILINE)
    assert len(set(pids)) == 2, out  # two daemon processes
    assert (home / "daemon-1.log").exists()
    assert (home / "daemon-2.log").exists()
    assert not (home / "daemon.json").exists()
    assert elapsed < 40


def test_a_used_home_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "something").write_text("x")
    result = CliRunner().invoke(cli, ["demo", "--daemon", "--dir", str(home)])
    assert result.exit_code == 2
    assert "not empty" in result.output
    assert sorted(p.name for p in home.iterdir()) == ["something"]


# -- the checks: a broken resume is caught ------------------------------------------------------
LEDGER = list(range(1, 14))


def test_a_stream_equal_to_the_ledger_has_no_problem() -> None:
    assert stream_problems(LEDGER, LEDGER) == []


@pytest.mark.parametrize(
    ("received", "problem"),
    [
        ([1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13], "never received: 5"),  # resumed one too far
        ([1, 2, 3, 4, 5, 5, 6, 7, 8, 9, 10, 11, 12, 13], "received more than once: 5"),
        ([1, 2, 3, 4, 5], "never received: 6, 7, 8, 9, 10, 11, 12, 13"),  # the tail lost
        ([1, 2, 3, 5, 4, 6, 7, 8, 9, 10, 11, 12, 13], "out of order: 5 then 4"),
        ([*LEDGER, 14], "received but not in the ledger: 14"),
    ],
)
def test_a_broken_stream_is_named(received: list[int], problem: str) -> None:
    assert problem in stream_problems(received, LEDGER)


def test_a_ledger_with_a_hole_is_named() -> None:
    assert any("not 1..3" in p for p in stream_problems([1, 2, 4], [1, 2, 4]))


def _passing() -> Observed:
    turn = "t1"
    ledger = [{"sequence": n, "type": "message", "turnId": turn} for n in LEDGER]
    ledger[-1]["type"] = "turn.completed"
    ledger.append({"sequence": 14, "type": "settled", "turnId": None})
    return Observed(
        turn_id=turn,
        received=list(LEDGER),
        statuses=["queued", "running", "completed"],
        completed_at_ms=2_000,
        before_kill=9,
        kill_ms=1_000,
        ledger=ledger,
        resend={"turn": {"id": turn}, "duplicate": True},
        turn_count=1,
        stop_status=0,
        daemon_file_left=False,
    )


def test_the_checks_pass_on_a_good_run() -> None:
    verdict = judge(_passing())
    assert verdict.ok, verdict.lines
    assert tuple(verdict.checks) == CHECKS


@pytest.mark.parametrize(
    ("change", "failed"),
    [
        ({"received": [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13]}, "stream_exactly_once"),
        ({"received": [*range(1, 10), 9, *range(10, 14)]}, "stream_exactly_once"),
        ({"received": list(range(1, 10))}, "stream_exactly_once"),
        ({"before_kill": 0, "kill_ms": 0}, "killed_mid_turn"),
        ({"completed_before_kill": True}, "killed_mid_turn"),
        ({"completed_at_ms": 900}, "resumed_not_interrupted"),  # done before the kill
        ({"statuses": ["queued", "running", "interrupted"]}, "resumed_not_interrupted"),
        ({"resend": {"turn": {"id": "t2"}, "duplicate": False}}, "idempotent_resend"),
        ({"turn_count": 2}, "idempotent_resend"),
        ({"stop_status": None}, "clean_stop"),
        ({"daemon_file_left": True}, "clean_stop"),
    ],
)
def test_each_broken_promise_fails_its_check(change: dict[str, object], failed: str) -> None:
    seen = copy.deepcopy(_passing())
    for name, value in change.items():
        setattr(seen, name, value)
    verdict = judge(seen)
    assert not verdict.ok
    assert not verdict.checks[failed]
    assert any(line.startswith("FAIL") for line in verdict.lines)
