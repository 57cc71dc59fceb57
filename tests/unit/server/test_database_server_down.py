"""``agentkeep serve --database URL`` when its PostgreSQL server goes away and comes back: the
server's counterpart of a deleted store file or a full disk under SQLite's.

A throwaway cluster of the test's own (``scripts/postgres_cluster.py``) is stopped in
``immediate`` mode (a crash: every session cut) under a running daemon. While it is down
every request that needs the store is refused promptly with a 503 and a code, never a 500,
never a hang; ``/healthz`` stays alive (the daemon is not broken, its store is away). Once
the cluster is back on the same port the daemon writes and reads again by itself, without a
restart (a session runs a turn to its end again), and nothing acknowledged before is lost;
SIGTERM still ends it.

Needs PostgreSQL's server binaries; runs on the PostgreSQL pass (it takes the session's
server fixture only to be skipped on the SQLite pass)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import httpx
import pytest
from tests.postgres_server import cluster_script, with_schema
from tests.unit.subprocesses import AGENTKEEP, first_line

TOKEN = "server-down-token-0123456789-abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SERVE = ("--json", "serve", "--port", "0")
#: A refusal must come within this (a hang would be the request timeout instead).
PROMPT = 15.0
#: How long the daemon may take to write again once the server is back.
RECOVERY = 60.0
#: The codes a request that needs the unreachable store may be refused with.
UNREACHABLE = {"store_unavailable"}


class OwnCluster:
    """A cluster in a directory of its own, stopped and started again on the same port."""

    def __init__(self, script: ModuleType, directory: Path) -> None:
        self.cluster = script.Cluster(directory, script.ensure_bindir(allow_install=False))
        self.url = str(self.cluster.start(timeout=60))

    def crash(self) -> None:
        self.cluster.stop(mode="immediate")

    def restart(self) -> None:
        assert str(self.cluster.start(timeout=60)) == self.url  # the same port again


@pytest.fixture
def own_cluster(postgres_server: str) -> Iterator[OwnCluster]:
    script = cluster_script()
    try:
        script.ensure_bindir(allow_install=False)
    except script.ClusterError as error:
        pytest.skip(f"PostgreSQL's server binaries are not installed: {error}")
    directory = Path(tempfile.mkdtemp(prefix="agentkeep-pg-down-"))
    try:
        made = OwnCluster(script, directory)
        try:
            yield made
        finally:
            with contextlib.suppress(script.ClusterError, OSError):
                made.cluster.stop(mode="immediate")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _until(check: Callable[[], bool], seconds: float) -> bool:
    """Poll ``check`` (a request to the daemon) until it holds or ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False


def _refused(answer: httpx.Response, elapsed: float) -> str:
    """The code of a prompt 503 refusal (fails on a 500, another status or a slow answer)."""
    assert elapsed < PROMPT, f"{answer.request.method} {answer.request.url}: {elapsed:.1f} s"
    assert answer.status_code == 503, (answer.request.url, answer.status_code, answer.text)
    code = str(answer.json()["error"]["code"])
    assert code in UNREACHABLE, answer.text
    return code


def _timed(send: Callable[[], httpx.Response]) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    answer = send()
    return answer, time.monotonic() - started


def test_a_database_server_that_goes_away_is_refused_clearly_and_recovered_from(
    tmp_path: Path, own_cluster: OwnCluster
) -> None:
    url = with_schema(own_cluster.url, "down_and_back")
    log = (tmp_path / "serve.log").open("w")  # the daemon's log, read after a failure
    process = subprocess.Popen(
        [*AGENTKEEP, "--home", str(tmp_path / "home"), "--database", url, *SERVE],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env={**os.environ, "AGENTKEEP_DAEMON_TOKEN": TOKEN},
    )
    try:
        daemon = json.loads(first_line(process, timeout=60))["url"]
        with httpx.Client(base_url=daemon, headers=AUTH, timeout=PROMPT * 4) as client:
            assert client.post("/v1/agents", json={"id": "before"}).status_code == 201
            made = client.post("/v1/sessions", json={"agentId": "before", "sessionId": "s1"})
            assert made.status_code == 201, made.text

            # A turn under way (the demo model streams slowly) when the server goes away.
            running = client.post(
                "/v1/sessions/s1/messages", json={"message": "Add 40 and 2.", "wait": False}
            )
            assert running.status_code == 202, running.text
            own_cluster.crash()
            # Writes and reads, through the writer's session and the readers' alike.
            requests: list[Callable[[], httpx.Response]] = [
                lambda: client.post("/v1/agents", json={"id": "during"}),
                lambda: client.get("/v1/agents"),
                lambda: client.get("/v1/agents/before"),
                lambda: client.post("/v1/sessions", json={"agentId": "before"}),
                lambda: client.get("/v1/sessions/s1"),
                lambda: client.post(
                    "/v1/sessions/s1/messages", json={"message": "hi", "wait": False}
                ),
                lambda: client.post("/v1/agents", json={"id": "during"}),  # again: still refused
            ]
            for send in requests:
                _refused(*_timed(send))
            health = client.get("/healthz")
            assert health.status_code == 200, health.text  # alive: the store is away, not lost

            own_cluster.restart()
            assert _until(
                lambda: client.post("/v1/agents", json={"id": "after"}).status_code == 201,
                RECOVERY,
            ), "the daemon did not write again once the server was back"
            listed = client.get("/v1/agents")
            assert listed.status_code == 200, listed.text
            ids = {agent["id"] for agent in listed.json()["agents"]}
            assert {"before", "after"} <= ids
            assert "during" not in ids  # refused means not written
            assert client.get("/v1/sessions/s1").status_code == 200
            # The session's agent runs a turn to its end again (the demo model).
            turn = client.post("/v1/sessions/s1/messages", json={"message": "Add 2 and 2."})
            assert turn.status_code == 200, turn.text
            assert turn.json()["turn"]["status"] == "completed", turn.text
            # The turn the crash cut ended too (the turns of a session run in order).
            turns = client.get("/v1/sessions/s1/turns").json()["turns"]
            assert {t["status"] for t in turns} <= {"completed", "failed", "cancelled"}, turns
            assert client.get("/healthz").status_code == 200
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        process.wait(PROMPT * 2)
        assert time.monotonic() - started < PROMPT * 2
        assert process.returncode == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        assert process.stdout is not None
        process.stdout.close()
        log.close()
