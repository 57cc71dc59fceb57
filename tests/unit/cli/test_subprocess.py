"""The installed ``agentkeep`` console script, run as a real process the way users run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest
from tests.postgres_server import on_sqlite

AGENTKEEP = str(Path(sys.executable).parent / "agentkeep")
HOLD_STORE = """
import sys
import time
from agentkeep.persistence import Store
store = Store.open(sys.argv[1])
print("held", flush=True)
sys.stdin.readline()
store.close()
"""


def new_user_env() -> dict[str, str]:
    """The environment of `make demo`: no AGENTKEEP_HOME, and the venv is not on PATH."""
    env = {k: v for k, v in os.environ.items() if k != "AGENTKEEP_HOME"}
    path = env.get("PATH", "").split(os.pathsep)
    env["PATH"] = os.pathsep.join(d for d in path if not (Path(d) / "agentkeep").exists())
    return env


def run(*args: str, cwd: Path, timeout: float = 100) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AGENTKEEP, *args],
        cwd=cwd,
        env=new_user_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_json_goes_to_stdout_and_logs_to_stderr(tmp_path: Path) -> None:
    home = str(tmp_path / "state")
    created = run(
        "--home",
        home,
        "--json",
        "--log-level",
        "info",
        "session",
        "start",
        "--id",
        "a1",
        cwd=tmp_path,
    )
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["id"] == "a1"
    # Not a terminal: every log line on stderr is a JSON object.
    logs = [json.loads(line) for line in created.stderr.splitlines()]
    assert any(entry["event"] == "store_opened" for entry in logs)
    assert all(entry["level"] in ("info", "warning", "error") for entry in logs)


def test_the_default_log_level_keeps_output_clean(tmp_path: Path) -> None:
    home = str(tmp_path / "state")
    assert run("--home", home, "session", "start", "--id", "a1", cwd=tmp_path).returncode == 0
    answered = run(
        "--home", home, "session", "send", "a1", "What is 3 * 5?", "--wait", cwd=tmp_path
    )
    assert answered.returncode == 0
    assert answered.stdout == "3 * 5 = 15.\n"
    assert answered.stderr == ""


def test_a_store_held_by_another_process_names_that_process(tmp_path: Path) -> None:
    home = tmp_path / "state"
    assert run("--home", str(home), "session", "start", "--id", "a1", cwd=tmp_path).returncode == 0
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_STORE, str(home)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdin is not None
        while holder.stdout.readline().strip() != "held":  # skip its log lines
            pass
        # Writes need the owner; reads do not (see test_reads_while_owned.py).
        for args in (
            ("session", "send", "a1", "hi", "--wait"),
            (
                "session",
                "start",
            ),
            ("resume",),
        ):
            result = run("--home", str(home), "--json", *args, cwd=tmp_path)
            assert result.returncode == 3, args
            assert result.stdout == ""
            error = json.loads(result.stderr)["error"]
            assert error["code"] == "store_locked"
            assert f"process {holder.pid}" in error["message"]
            assert f"Stop process {holder.pid}" in error["hint"]
        refused = run("--home", str(home), "session", "delete", "a1", cwd=tmp_path)
        assert f"in use by process {holder.pid}" in refused.stderr
    finally:
        if holder.stdin is not None:
            holder.stdin.write("\n")
            holder.stdin.close()
        holder.wait(timeout=30)
        if holder.stdout is not None:
            holder.stdout.close()
    # Released: the store works again.
    assert run("--home", str(home), "session", "list", cwd=tmp_path).returncode == 0


@pytest.mark.sqlite_only(
    "`agentkeep demo` runs on its directory's agents.db (and db-checks that file); "
    "make demo-postgres is its PostgreSQL run"
)
def test_the_demo_runs_end_to_end_like_a_new_user_runs_it(tmp_path: Path) -> None:
    # `make demo` runs `.venv/bin/agentkeep demo` from the project directory, nothing set up.
    started = time.monotonic()
    result = run("demo", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert time.monotonic() - started < 60  # the promise: well under a minute
    assert (
        "demo: OK — every message answered once; save_note was not repeated after the SIGKILL"
        in result.stdout
    )
    assert "SIGKILL → pid" in result.stdout
    (home,) = (tmp_path / ".agentkeep").glob("demo-*")  # a fresh directory, nothing clobbered

    # The durable outcome, read back independently of what the demo printed.
    assert (home / "notes.txt").read_text().splitlines() == ["water the plants at 6"]
    runs = [json.loads(line) for line in (home / "tool-runs.jsonl").read_text().splitlines()]
    note_runs = [r for r in runs if r["tool"] == "save_note"]
    assert len(note_runs) == 1
    assert note_runs[0]["pid"] != os.getpid()  # it ran in the killed child, and never again
    assert len({r["pid"] for r in runs}) == 2  # the demo process and the killed child

    if on_sqlite():  # db check is SQLite's
        checked = run("--home", str(home), "--json", "db", "check", cwd=tmp_path)
        assert checked.returncode == 0
        assert json.loads(checked.stdout)["ok"] is True
    (agent,) = json.loads(
        run("--home", str(home), "--json", "session", "list", cwd=tmp_path).stdout
    )["sessions"]
    assert (agent["status"], agent["owes"]) == ("active", None)  # nothing owed
    transcript = run(
        "--home", str(home), "--json", "session", "transcript", agent["id"], cwd=tmp_path
    )
    messages = json.loads(transcript.stdout)["messages"]
    users = [m for m in messages if m["role"] == "user"]
    assert len(users) == 3
    results = [m for m in messages if m["role"] == "tool"]
    call_ids = [r["call_id"] for r in results]
    assert len(call_ids) == len(set(call_ids))  # one result per call
    inspect = f"agentkeep --home {home.relative_to(tmp_path)} session show {agent['id']}"
    assert inspect in result.stdout
    assert msgspec.json.decode(transcript.stdout)  # well-formed JSON

    # Copy-paste: every command the demo printed runs as printed, from where it ran.
    printed = result.stdout.split("Inspect it yourself")[1].splitlines()[1:]
    commands = [line.strip() for line in printed if line.strip()]
    assert len(commands) == 5
    for command in commands:
        ran = subprocess.run(
            command,
            shell=True,
            cwd=tmp_path,
            env=new_user_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert ran.returncode == 0, (command, ran.stderr)
        assert ran.stdout
    # `agentkeep list` right after the demo (no --home) names the demo's store.
    listed = run("session", "list", cwd=tmp_path)
    assert listed.returncode == 4
    assert f"The demo's store is in {home.relative_to(tmp_path)}" in listed.stderr


@pytest.mark.sqlite_only(
    "`agentkeep demo` runs on its directory's agents.db (and db-checks that file); "
    "make demo-postgres is its PostgreSQL run"
)
def test_the_demo_can_print_a_json_summary(tmp_path: Path) -> None:
    result = run("--json", "demo", "--dir", str(tmp_path / "d"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["ok"] is True
    assert summary["home"] == str(tmp_path / "d")
    assert all(summary["checks"].values())
    assert "demo: OK" in result.stderr  # the narrative goes to stderr under --json
