"""Seed 002's documents' examples, verbatim where they are JSON, and the real processes they
run against: ``agentkeep serve`` and the CLI as subprocesses, found the way a client finds them.

Everything here is copied from ``@amalgm/agents`` 0.1.0's docs (DEFINITIONS.md, REST.md,
CLI.md, MCP.md, DRIVERS.md): a client written to those documents must work unchanged.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

SRC = Path(__file__).resolve().parents[3] / "src"
#: Every wait on a process here is bounded by this.
PROCESS_TIMEOUT = 60.0

#: DEFINITIONS.md's example definition, verbatim.
DEFINITION_EXAMPLE: dict[str, Any] = json.loads("""
{
  "id": "reviewer",
  "name": "Reviewer",
  "description": "Reviews implementation work",
  "instructions": "Find correctness risks before style issues.",
  "driver": {
    "id": "codex",
    "config": { "sandbox": "workspace-write" }
  },
  "model": {
    "id": "openai/gpt-5.5",
    "settings": { "effort": "high" }
  },
  "authRef": "openai-primary",
  "resources": {
    "files": ["AGENTS.md"],
    "skills": ["code-review"],
    "subagents": ["security-reviewer"]
  },
  "toolbox": {
    "toolIds": ["git"],
    "actionIds": ["github.pull_request_get"]
  },
  "workspace": { "cwd": "/projects/product" },
  "metadata": { "icon": "search" }
}
""")

#: REST.md's "Send a message" body, verbatim.
SEND_EXAMPLE: dict[str, Any] = json.loads("""
{
  "message": "Review the current diff.",
  "idempotencyKey": "review-001",
  "wait": true
}
""")

#: MCP.md's seven tools, by name.
SEED_TOOLS = {
    "agents_list",
    "agents_get",
    "agents_create",
    "agents_update",
    "agents_delete",
    "agents_get_conversation",
    "talk_to_agent",
}

#: REST.md's error envelope example's shape: every error body has exactly these keys.
ERROR_KEYS = {"code", "message", "details"}


def environment(**extra: str) -> dict[str, str]:
    """The environment of a child agentkeep process: this checkout's sources first."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(SRC), env.get("PYTHONPATH", "")] if p)
    env.pop("AGENTKEEP_HOME", None)
    env.update(extra)
    return env


def agentkeep(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``agentkeep ARGS...`` as a subprocess (the console script's module)."""
    return subprocess.run(
        [sys.executable, "-m", "agentkeep.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env or environment(),
        timeout=PROCESS_TIMEOUT,
        check=False,
    )


@dataclass
class Daemon:
    """``agentkeep serve`` running as a subprocess on an ephemeral loopback port."""

    process: subprocess.Popen[bytes]
    home: Path
    url: str
    token: str

    def client(self, **options: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token}", **options.pop("headers", {})}
        options.setdefault("timeout", 30.0)
        return httpx.Client(base_url=self.url, headers=headers, **options)


@contextmanager
def serving(
    home: Path, *extra: str, after: Sequence[str] = (), env: dict[str, str] | None = None
) -> Iterator[Daemon]:
    """Start ``agentkeep --state-dir HOME EXTRA... serve --port 0 --ready-file F AFTER...``
    and yield it once the ready file exists (serve writes it only when it listens); SIGTERM
    it afterwards (unless the test ended it)."""
    home.mkdir(parents=True, exist_ok=True)
    ready = home.parent / f"{home.name}.ready"
    ready.unlink(missing_ok=True)
    log = (home.parent / f"{home.name}.serve.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentkeep.cli",
            "--state-dir",
            str(home),
            *extra,
            "serve",
            "--port",
            "0",
            "--ready-file",
            str(ready),
            *after,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env or environment(),
    )
    try:
        deadline = time.monotonic() + PROCESS_TIMEOUT
        while not ready.exists():  # a bounded wait for a process, not an ordering of threads
            if process.poll() is not None or time.monotonic() > deadline:
                log.flush()
                raise AssertionError(
                    "serve did not become ready:\n"
                    + (home.parent / f"{home.name}.serve.log").read_text(errors="replace")
                )
            time.sleep(0.05)
        info = json.loads((home / "daemon.json").read_text())
        token = (home / "daemon.token").read_text().strip()
        yield Daemon(process=process, home=home, url=info["url"], token=token)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=PROCESS_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        log.close()


def is_error(response: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    """Assert ``response`` is the wire's error envelope with ``status`` (and ``code``)."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == ERROR_KEYS, body
    if code is not None:
        assert body["error"]["code"] == code, body
    error: dict[str, Any] = body["error"]
    return error


def is_agent_message(value: Any, role: str) -> Sequence[dict[str, Any]]:
    """Assert ``value`` is the wire's ``AgentMessage`` of ``role``; its parts."""
    assert isinstance(value, dict), value
    assert set(value) == {"role", "parts"}, value
    assert value["role"] == role, value
    parts = value["parts"]
    assert isinstance(parts, list), value
    for part in parts:
        assert part["type"] in ("text", "reference", "data"), part
        keys = {"text": {"type", "text"}, "reference": {"type", "uri", "name", "mediaType"}}
        assert set(part) == keys.get(part["type"], {"type", "name", "data"}), part
    return parts


def text_of(message: dict[str, Any]) -> str:
    """The concatenated text parts of an ``AgentMessage``."""
    return "".join(p["text"] for p in message["parts"] if p["type"] == "text")
