"""``agentkeep serve --ready-file PATH``: PATH appears only once the daemon
listens and its token exists, so a script waits for it instead of sleeping; a stale PATH never
passes for a new daemon; it is removed when the daemon stops."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import httpx
from tests.unit.subprocesses import AGENTKEEP, first_line

TIMEOUT = 30.0


def test_the_ready_file_names_a_listening_daemon_with_its_token(tmp_path: Path) -> None:
    home = tmp_path / "home"  # no store and no token yet
    ready = tmp_path / "ready.json"
    ready.write_text('{"url": "http://127.0.0.1:9", "pid": 1}\n')  # a stale one
    process = subprocess.Popen(
        [*AGENTKEEP, "--home", str(home), "serve", "--port", "0", "--ready-file", str(ready)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "AGENTKEEP_DAEMON_TOKEN": ""},
    )
    try:
        first_line(process)  # printed right after the ready file was written
        value = json.loads(ready.read_text())
        assert value["pid"] == process.pid
        assert value["url"] == f"http://127.0.0.1:{value['port']}"
        assert value["token_file"] == str(home / "daemon.token")
        assert json.loads((home / "daemon.json").read_text())["url"] == value["url"]
        token = Path(value["token_file"]).read_text().strip()
        with httpx.Client(base_url=value["url"], timeout=TIMEOUT) as client:
            listed = client.get("/v1/agents", headers={"Authorization": f"Bearer {token}"})
            assert listed.status_code == 200
            assert client.get("/v1/agents").status_code == 401
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=TIMEOUT) == 0
        assert not ready.exists()
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".ready.json")]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def test_serve_refused_leaves_no_ready_file(tmp_path: Path) -> None:
    """A daemon that never listens (a bad --host) leaves no ready file: a waiting script
    sees the process exit instead."""
    ready = tmp_path / "ready.json"
    done = subprocess.run(
        [
            *AGENTKEEP,
            "--home",
            str(tmp_path / "home"),
            "serve",
            "--host",
            "192.0.2.1",
            "--port",
            "0",
            "--ready-file",
            str(ready),
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "AGENTKEEP_DAEMON_TOKEN": ""},
    )
    assert done.returncode != 0
    assert not ready.exists()
