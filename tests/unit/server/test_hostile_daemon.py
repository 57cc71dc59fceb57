"""``agentkeep serve`` under hostile and unlucky conditions, as a real process.

- A full disk (a 3 MB tmpfs, mounted in a private mount namespace with ``unshare -m``) that
  holds the store *and* the daemon's log: writes get a 503 saying the disk is full, then,
  space freed, writes resume without a restart, and SIGTERM finishes.
- Private by default whatever the token's source: the home 0700, every file in it 0600.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from tests.postgres_server import on_sqlite
from tests.unit.subprocesses import AGENTKEEP, first_line

TIMEOUT = 30.0
TOKEN = "hostile-token-0123456789-abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _can_mount_tmpfs(directory: Path) -> str | None:
    """None if a private tmpfs can be mounted here, else why not."""
    if shutil.which("unshare") is None:
        return "no unshare(1) on this machine"
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root (it runs as root in CI)"
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", 'mount -t tmpfs -o size=1m tmpfs "$0"', str(directory)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    if probe.returncode != 0:
        return f"cannot mount a tmpfs in a private mount namespace: {probe.stderr.strip()}"
    return None


def _write_until_full(fd: int, chunk: int) -> int:
    written = 0
    while True:
        try:
            written += os.write(fd, b"x" * chunk)
        except OSError as error:
            if error.errno != errno.ENOSPC:
                raise
            return written


def _fill(path: Path) -> int:
    """Write ``path`` until the file system is full (ENOSPC); the bytes written."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        # Then the last partial blocks, so nothing is left for anyone.
        return _write_until_full(fd, 65536) + _write_until_full(fd, 512)
    finally:
        os.close(fd)


def _recover(client: httpx.Client, mounted: Path) -> None:
    """Free the space: writes resume, no restart; turns run to their end again."""
    (mounted / "filler").unlink()
    resumed = client.post("/v1/agents", json={"id": "after"})
    assert resumed.status_code == 201, resumed.text
    assert client.get("/v1/agents/after").status_code == 200
    assert client.get("/v1/agents/before").status_code == 200
    # A turn runs to the end, and none from the full disk is left queued or running (the
    # turns of a session run in order).
    turn = client.post("/v1/sessions/s1/messages", json={"message": "Add 2 and 2."})
    assert turn.status_code == 200, turn.text
    assert turn.json()["turn"]["status"] == "completed"
    turns = client.get("/v1/sessions/s1/turns").json()["turns"]
    assert {t["status"] for t in turns} <= {"completed", "failed", "cancelled"}, turns


@pytest.mark.parametrize("space_back", [True, False], ids=["space_freed", "still_full"])
def test_a_full_disk_under_the_store_and_the_log_is_survived(
    tmp_path: Path, space_back: bool
) -> None:
    """``still_full``: SIGTERM while the disk is still full (a turn's commits failing) ends
    the daemon too. On PostgreSQL the store is on the server and only the log (and the state
    directory) is on the full disk: no write is refused, the daemon serves on, and ends."""
    store_on_disk = on_sqlite()
    disk = tmp_path / "disk"
    disk.mkdir()
    reason = _can_mount_tmpfs(disk)
    if reason is not None:
        pytest.skip(reason)
    # The store and the daemon's log (its stderr, at info: a line per request) on the disk.
    script = 'mount -t tmpfs -o size=3m tmpfs "$0" && exec "$@" 2>"$0/serve.log"'
    process = subprocess.Popen(
        [
            *("unshare", "-m", "sh", "-c", script, str(disk)),
            *(*AGENTKEEP, "--home", str(disk / "home"), "--json", "serve", "--port", "0"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "AGENTKEEP_DAEMON_TOKEN": TOKEN},
    )
    try:
        url = json.loads(first_line(process))["url"]
        # The tmpfs as the daemon sees it (its mount namespace), through /proc.
        mounted = Path(f"/proc/{process.pid}/root") / disk.relative_to("/")
        assert (mounted / "serve.log").exists()
        with httpx.Client(base_url=url, headers=AUTH, timeout=TIMEOUT) as client:
            assert client.post("/v1/agents", json={"id": "before"}).status_code == 201
            session = client.post("/v1/sessions", json={"agentId": "before", "sessionId": "s1"})
            assert session.status_code == 201, session.text
            # A turn under way (the demo model streams slowly) when the disk fills up.
            running = client.post(
                "/v1/sessions/s1/messages", json={"message": "Add 40 and 2.", "wait": False}
            )
            assert running.status_code == 202, running.text
            _fill(mounted / "filler")
            refusals: list[httpx.Response] = []
            # Enough refusals that the log (two lines each) outgrows its last page on the
            # full disk too; a checkpoint may let a few writes reuse the WAL's space.
            # On a server, as many writes whose log lines the full disk refuses.
            for n in range(100):
                answer = client.post(
                    "/v1/agents", json={"id": f"full{n}", "description": "y" * 4000}
                )
                assert answer.status_code in ((201, 503) if store_on_disk else (201,)), answer.text
                if answer.status_code == 503:
                    refusals.append(answer)
                if len(refusals) >= 30:
                    break
            if store_on_disk:
                assert len(refusals) >= 30, "the disk did not refuse writes"
            for n in range(3):  # turns asked for on the full disk: refused or accepted
                sent = client.post(
                    "/v1/sessions/s1/messages", json={"message": f"Add {n} and 2.", "wait": False}
                )
                assert sent.status_code in ((202, 503) if store_on_disk else (202,)), sent.text
                if sent.status_code == 503:
                    refusals.append(sent)
            assert client.get("/healthz").status_code == 200  # alive all along
            log = (mounted / "serve.log").read_text(encoding="utf-8", errors="replace")
            if space_back:
                _recover(client, mounted)
        assert '"http_request"' in log  # the log lives on that disk
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        process.wait(TIMEOUT)
        assert time.monotonic() - started < 15.0
        assert process.returncode == 0
        for refused in refusals:  # each refusal said why
            error = refused.json()["error"]
            assert error["code"] == "store_not_writable", error
            assert "disk holding the store is full" in error["message"]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        assert process.stdout is not None
        process.stdout.close()


@pytest.mark.parametrize("source", ["environment", "token_file"])
def test_the_home_is_private_whatever_the_token_source(tmp_path: Path, source: str) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "AGENTKEEP_DAEMON_TOKEN": ""}
    options: list[str] = []
    if source == "environment":
        env["AGENTKEEP_DAEMON_TOKEN"] = TOKEN
    else:
        token_file = tmp_path / "token"
        token_file.write_text(TOKEN + "\n")
        token_file.chmod(0o600)
        options = ["--token-file", str(token_file)]
    process = subprocess.Popen(
        [*AGENTKEEP, "--home", str(home), "--json", "serve", "--port", "0", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        umask=0o022,  # a permissive default: privacy must not depend on the caller's
    )
    try:
        url = json.loads(first_line(process))["url"]
        with httpx.Client(base_url=url, headers=AUTH, timeout=TIMEOUT) as client:
            assert client.post("/v1/agents", json={"id": "private"}).status_code == 201
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
        files = {entry.name: stat.S_IMODE(entry.stat().st_mode) for entry in home.iterdir()}
        # On a server the store is a schema: the directory keeps its lock file and the
        # daemon's files, private all the same.
        store_files = {"agents.db", "agents.db-wal"} if on_sqlite() else {"agents.db.lock"}
        assert {*store_files, "daemon.json"} <= set(files)
        assert files == dict.fromkeys(files, 0o600), files
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(TIMEOUT)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            assert process.stdout is not None
            process.stdout.close()
    assert process.returncode == 0
