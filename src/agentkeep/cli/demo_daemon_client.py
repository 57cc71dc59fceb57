"""The client side of ``agentkeep demo --daemon``: a real ``agentkeep serve`` process, found the
way any client finds it (``daemon.json`` for the URL, ``daemon.token`` for the token). Its
event stream is parsed by the clients' one SSE parser, :mod:`agentkeep.client.sse`.

Nothing here reaches into the daemon: everything the demo learns comes over HTTP or from the
two files the daemon writes for its clients.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentkeep.cli.output import CliError
from agentkeep.server import DAEMON_FILE, TOKEN_ENV, TOKEN_FILE


def demo_failed(message: str, *, hint: str | None = None) -> CliError:
    """The error every failed step of the demo raises (exit 1)."""
    return CliError(message, code="demo_failed", hint=hint or "Run it again with -v.")


@dataclass(kw_only=True)
class Daemon:
    """A running ``agentkeep serve`` child process and how to reach it."""

    process: subprocess.Popen[str]
    url: str
    token: str
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def headers(self) -> dict[str, str]:
        """The auth header every ``/v1`` request carries."""
        return {"Authorization": f"Bearer {self.token}"}

    def kill(self) -> int:
        """SIGKILL it and reap it; returns its exit status (``-9``)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGKILL)
        return self.process.wait()

    def terminate(self, timeout_seconds: float) -> int | None:
        """SIGTERM it and wait; its exit status, or None (then killed) if it hangs."""
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_seconds)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def close(self) -> None:
        """Kill it if it still runs (the demo failed half-way) and release its pipe."""
        if self.process.poll() is None:
            self.kill()
        if self.process.stdout is not None:
            self.process.stdout.close()


def _first_line(process: subprocess.Popen[str], timeout_seconds: float) -> str:
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(timeout_seconds):
            return ""
        return process.stdout.readline()


def start_daemon(home: Path, log_path: Path, *, timeout_seconds: float) -> Daemon:
    """Start ``agentkeep --home HOME serve --port 0`` and wait until it listens.

    Its stderr (the structured access log) goes to ``log_path``. The URL is read from
    ``daemon.json`` once the daemon says it listens, and must name this process: a
    SIGKILLed predecessor leaves its own file behind. The token is ``daemon.token``
    (generated on the first start): ``$AGENTKEEP_DAEMON_TOKEN`` is kept out of the child's
    environment so the token file is the one source.

    Raises:
        CliError: it did not start listening in time, or its files disagree with it.
    """
    command = [sys.executable, "-m", "agentkeep.cli", "--home", str(home), "--json"]
    command += ["serve", "--port", "0"]
    env = {name: value for name, value in os.environ.items() if name != TOKEN_ENV}
    env["PYTHONUNBUFFERED"] = "1"
    with log_path.open("a", encoding="utf-8") as log:
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=log,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
        )
    try:
        line = _first_line(process, timeout_seconds)
        if not line:
            raise demo_failed(
                f"agentkeep serve did not start listening within {timeout_seconds:.0f} s "
                f"(exit status: {process.poll()}).",
                hint=f"See its log: {log_path}",
            )
        announced: dict[str, Any] = json.loads(line)
        found: dict[str, Any] = json.loads((home / DAEMON_FILE).read_text(encoding="utf-8"))
        if found.get("pid") != process.pid or found.get("url") != announced.get("url"):
            raise demo_failed(
                f"{home / DAEMON_FILE} says {found}, but the daemon started is pid "
                f"{process.pid} at {announced.get('url')}."
            )
        token = (home / TOKEN_FILE).read_text(encoding="utf-8").strip()
    except BaseException:
        if process.poll() is None:
            process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()
        raise
    return Daemon(process=process, url=str(found["url"]), token=token, log_path=log_path)


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (what a client checks in a stale daemon.json)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
