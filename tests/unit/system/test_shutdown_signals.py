"""A daemon's SIGTERM/SIGINT: a graceful shutdown that releases the store and keeps owed work.

The daemon is a real child process (signals go to a process, and the handler must run in its
main thread); it reports its progress on stdout, so the test orders nothing with sleeps.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import IO

import pytest

import agentkeep as ak

DAEMON = textwrap.dedent(
    """
    import sys
    import agentkeep as ak

    providers = ak.Providers()
    providers.add("local", ak.ScriptedModel(), kind="gym")
    system = ak.AgentSystem.open(sys.argv[1], providers=providers, provider="local", model="gym-1")
    agent = system.create(id="daemonagent")
    system.internals.accept(agent.id, "send", ak.user("left owed"), start=False)
    system.install_signal_handlers()
    print("ready", flush=True)
    finished = system.wait_for_shutdown(timeout_seconds=60)
    print("shut down" if finished else "timed out", flush=True)
    """
)


def next_report(stdout: IO[str]) -> str:
    """The daemon's next progress line (structlog's lines share its stdout)."""
    for line in stdout:
        if not line.startswith("20"):  # a log line starts with its timestamp
            return line.strip()
    return "<the daemon exited>"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_shuts_the_daemon_down_gracefully(tmp_path: Path, signum: int) -> None:
    home = tmp_path / "state"
    with subprocess.Popen(
        [sys.executable, "-c", DAEMON, str(home)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as daemon:
        try:
            assert daemon.stdout is not None
            assert next_report(daemon.stdout) == "ready"
            daemon.send_signal(signum)
            assert next_report(daemon.stdout) == "shut down"
            assert daemon.wait(timeout=60) == 0
        finally:
            if daemon.poll() is None:
                daemon.kill()

    # The lock is free and the owed message is still owed: the next open resumes it.
    model = ak.ScriptedModel()
    model.add(ak.script.text("answered after the restart"))
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    with ak.AgentSystem.open(home, providers=providers, provider="local", model="gym-1") as system:
        assert system.wait_for_idle("daemonagent", timeout_seconds=30)
        messages = system.transcript("daemonagent")
    assert [type(m).__name__ for m in messages] == ["UserMessage", "AssistantMessage"]
