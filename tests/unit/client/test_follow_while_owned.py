"""``session events --follow`` without a daemon reads the store without its lock:
one terminal watches a session while another process owns the store and talks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.unit.subprocesses import wait_for_line

AGENTKEEP = str(Path(sys.executable).parent / "agentkeep")

# An agent system owning the store; on a line from stdin its agent takes a message and
# answers it (printing "answered"); on the next line (or EOF) it closes.
_OWNER = """
import sys
import agentkeep as ak
from agentkeep.providers.script import text
providers = ak.Providers()
providers.add("local", ak.ScriptedModel([text("answer from the owner")]), kind="gym")
system = ak.AgentSystem.open(sys.argv[1], providers=providers, provider="local", model="gym-1")
print("owned", flush=True)
sys.stdin.readline()
system.internals.accept("a1", "send", ak.user("written by the owner"))
assert system.wait_for_idle("a1", timeout_seconds=60)
print("answered", flush=True)
sys.stdin.readline()
system.close()
"""


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "AGENTKEEP_HOME"}


def _agentkeep(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AGENTKEEP, *args], env=_env(), capture_output=True, text=True, timeout=60
    )


def test_follow_watches_while_another_process_owns_the_store(tmp_path: Path) -> None:
    home = str(tmp_path / "state")
    assert _agentkeep("--home", home, "session", "start", "--id", "a1").returncode == 0
    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER, home],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=_env(),
    )
    follower: subprocess.Popen[str] | None = None
    try:
        assert owner.stdout is not None
        assert owner.stdin is not None
        wait_for_line(owner.stdout, "owned")
        # The owner holds the lock: a write from here is refused.
        assert _agentkeep("--home", home, "session", "send", "a1", "hi").returncode == 3
        follower = subprocess.Popen(
            [AGENTKEEP, "--home", home, "--json", "session", "events", "a1", "--follow"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        owner.stdin.write("\n")  # now the owner talks
        owner.stdin.flush()
        assert follower.stdout is not None
        seen = []
        for line in follower.stdout:  # live: the turn's events as the owner commits them
            seen.append(json.loads(line))
            if seen[-1]["type"] == "turn.completed":
                break
        else:
            assert follower.stderr is not None
            raise AssertionError(f"the follower ended: {follower.wait()} {follower.stderr.read()}")
        wait_for_line(owner.stdout, "answered")
        types = [event["type"] for event in seen]
        assert "turn.queued" in types
        assert "turn.running" in types
        assert [e["sequence"] for e in seen] == sorted(e["sequence"] for e in seen)
        follower.send_signal(signal.SIGINT)  # Ctrl-C ends a follow cleanly
        code = follower.wait(timeout=30)
        assert follower.stderr is not None
        assert code == 0, follower.stderr.read()
    finally:
        if follower is not None and follower.poll() is None:
            follower.kill()
            follower.wait()
        for stream in (follower.stdout, follower.stderr) if follower is not None else ():
            if stream is not None:
                stream.close()
        if owner.stdin is not None:
            owner.stdin.close()
        owner.wait(timeout=60)
        if owner.stdout is not None:
            owner.stdout.close()
