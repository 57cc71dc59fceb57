"""``list``, ``show``, ``transcript`` and ``db check`` read while another process owns the store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.postgres_server import on_sqlite
from tests.unit.subprocesses import wait_for_line

AGENTKEEP = str(Path(sys.executable).parent / "agentkeep")

# A running agent system owning the store; on a line from stdin its agent takes one more
# message (committed before "answered" is printed); on the next (or EOF) it closes.
_OWNER = """
import sys
import agentkeep as ak
providers = ak.Providers()
providers.add("local", ak.ScriptedModel(), kind="gym")
system = ak.AgentSystem.open(sys.argv[1], providers=providers, provider="local", model="gym-1")
print("owned", flush=True)
sys.stdin.readline()
system.internals.accept("a1", "send", ak.user("written by the owner"))
assert system.wait_for_idle("a1", timeout_seconds=60)
print("answered", flush=True)
sys.stdin.readline()
system.close()
"""


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AGENTKEEP_HOME"}
    return subprocess.run(
        [AGENTKEEP, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def owned(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    home = tmp_path / "state"
    assert (
        run(
            "--home", str(home), "session", "start", "--id", "a1", "--title", "t", cwd=tmp_path
        ).returncode
        == 0
    )
    assert (
        run(
            "--home", str(home), "session", "send", "a1", "hello", "--wait", cwd=tmp_path
        ).returncode
        == 0
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER, str(home)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert owner.stdout is not None
    assert owner.stdin is not None
    try:
        wait_for_line(owner.stdout, "owned")
        yield home, owner
    finally:
        owner.stdin.close()
        owner.wait(timeout=60)
        owner.stdout.close()


def test_reads_work_while_an_agent_system_owns_the_store(
    tmp_path: Path, owned: tuple[Path, subprocess.Popen[str]]
) -> None:
    home, owner = owned
    assert owner.stdin is not None
    assert owner.stdout is not None
    # The owner really holds the lock: a write is refused, naming it.
    refused = run("--home", str(home), "session", "send", "a1", "x", cwd=tmp_path)
    assert refused.returncode == 3
    assert f"process {owner.pid}" in refused.stderr

    listed = run("--home", str(home), "--json", "session", "list", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert [a["id"] for a in json.loads(listed.stdout)["sessions"]] == ["a1"]

    shown = run("--home", str(home), "--json", "session", "show", "a1", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["session"]["metadata"] == {"title": "t"}
    assert json.loads(shown.stdout)["runtime"]["metadata"] == {"title": "t"}

    if on_sqlite():  # db check is SQLite's
        checked = run("--home", str(home), "--json", "db", "check", cwd=tmp_path)
        assert checked.returncode == 0, checked.stderr
        assert json.loads(checked.stdout)["ok"] is True

    # What the owner commits is what the next read sees.
    owner.stdin.write("\n")
    owner.stdin.flush()
    wait_for_line(owner.stdout, "answered")
    transcript = run("--home", str(home), "--json", "session", "transcript", "a1", cwd=tmp_path)
    assert transcript.returncode == 0, transcript.stderr
    users = [m for m in json.loads(transcript.stdout)["messages"] if m["role"] == "user"]
    assert [m["content"][0]["text"] for m in users] == ["hello", "written by the owner"]

    missing = run("--home", str(home), "session", "show", "nobody", cwd=tmp_path)
    assert missing.returncode == 4  # an unknown agent is still exit 4, not 3
    assert owner.poll() is None  # the owner ran undisturbed throughout
