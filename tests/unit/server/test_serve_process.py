"""``agentkeep serve`` as a real process: it prints its ephemeral port, writes daemon.json
while listening, logs each request to stderr (never the token), and on SIGTERM ends an open
stream and exits cleanly within 5 s, removing daemon.json."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from httpx_sse import connect_sse
from tests.unit.subprocesses import AGENTKEEP, first_line

import agentkeep as ak
from agentkeep.cli import cli

TIMEOUT = 30.0
SEEDS = range(1, 1 + int(os.environ.get("AGENTKEEP_SSE_KILL_SEEDS", "1")))


def test_serve_port_0_daemon_json_and_sigterm(tmp_path: Path) -> None:
    home = tmp_path / "home"
    process = subprocess.Popen(
        [*AGENTKEEP, "--home", str(home), "--json", "serve", "--port", "0", "--heartbeat", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "AGENTKEEP_DAEMON_TOKEN": ""},
    )
    try:
        listening = json.loads(first_line(process))
        assert listening["port"] > 0
        assert listening["pid"] == process.pid
        daemon = json.loads((home / "daemon.json").read_text())
        assert daemon == {"pid": process.pid, "url": listening["url"]}
        token = (home / "daemon.token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        frames: list[str] = []
        opened = threading.Event()

        with httpx.Client(base_url=daemon["url"], headers=headers, timeout=TIMEOUT) as client:
            client.post("/v1/agents", json={"id": "helper"}).raise_for_status()
            session = client.post("/v1/sessions", json={"agentId": "helper"}).json()

            def follow() -> None:
                with (
                    httpx.Client(base_url=daemon["url"], headers=headers, timeout=TIMEOUT) as own,
                    connect_sse(own, "GET", f"/v1/sessions/{session['id']}/events/stream") as s,
                ):
                    opened.set()
                    frames.extend(frame.data for frame in s.iter_sse() if frame.data)

            follower = threading.Thread(target=follow)
            follower.start()
            assert opened.wait(TIMEOUT)
            assert client.get("/v1/agents").status_code == 200
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=TIMEOUT)
        elapsed = time.monotonic() - started
        follower.join(TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr
    assert elapsed < 5.0
    assert not follower.is_alive()
    assert not (home / "daemon.json").exists()
    assert token not in stderr
    requests = [json.loads(line) for line in stderr.splitlines() if '"http_request"' in line]
    assert {(r["method"], r["path"], r["status"]) for r in requests} >= {
        ("POST", "/v1/agents", 201),
        ("GET", "/v1/agents", 200),
    }


def test_serve_refuses_a_non_loopback_address_without_a_token(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["--home", str(tmp_path / "home"), "serve", "--host", "0.0.0.0", "--no-auth"]
    )
    assert result.exit_code == 2
    assert "without a token" in result.output
    assert not (tmp_path / "home").exists()  # refused before anything was opened


def _start(home: Path) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [*AGENTKEEP, "--home", str(home), "--json", "--log-level", "error", "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "AGENTKEEP_DAEMON_TOKEN": ""},
    )
    url: str = json.loads(first_line(process))["url"]
    return process, url


@pytest.mark.parametrize("seed", SEEDS)
def test_a_stream_resumes_across_a_daemon_sigkill_and_restart(tmp_path: Path, seed: int) -> None:
    """Read part of a stream, SIGKILL the daemon, start a new one (the kernel lock is free,
    daemon.json is rewritten), reconnect with Last-Event-ID: every event once, in order."""
    total = 40
    home = tmp_path / "home"
    providers = ak.Providers()
    providers.add("local", ak.ScriptedModel(), kind="gym")
    with ak.AgentSystem.open(home, providers=providers, provider="local", model="gym-1") as system:
        agent = system.create(id="kill1")
        for n in range(total):
            system.update_metadata(agent.id, {"n": n})
    rng = random.Random(seed)
    received: list[int] = []
    for round_ in range(3):
        process, url = _start(home)
        try:
            assert json.loads((home / "daemon.json").read_text())["pid"] == process.pid
            token = (home / "daemon.token").read_text().strip()
            headers = {"Authorization": f"Bearer {token}"}
            if received:
                headers["Last-Event-ID"] = str(received[-1])
            want = total - len(received) if round_ == 2 else rng.randint(1, 15)
            with (
                httpx.Client(base_url=url, headers=headers, timeout=TIMEOUT) as client,
                connect_sse(client, "GET", "/v1/sessions/kill1/events/stream") as source,
            ):
                for frame in source.iter_sse():
                    if frame.data:
                        received.append(json.loads(frame.data)["sequence"])
                        if len(received) == total or want == 1:
                            break
                        want -= 1
        finally:
            process.kill()
            process.communicate(timeout=TIMEOUT)
        assert (home / "daemon.json").exists()  # a SIGKILLed daemon leaves it behind
    assert received == list(range(1, total + 1))
