"""``agentkeep serve --partitions`` as real worker processes on a throwaway PostgreSQL.

Two workers split the partitions; sessions created and turns sent through either worker all
complete, one turn per idempotency key (a write for another worker's partition is forwarded
to it); a worker SIGKILLed while it owes turns is taken over by the other, which finishes
them, and clients retrying through the survivor with their keys get each turn once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from httpx_sse import connect_sse
from tests.unit.subprocesses import AGENTKEEP, first_line

from agentkeep.cli import cli
from agentkeep.partitions import partition_of
from agentkeep.persistence.opening import DATABASE_ENV

COUNT = 4
TOKEN = "worker-test-token-0123456789"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
TIMEOUT = 60.0
#: A local model pausing before each stream event: a turn takes a few tenths of a second
#: times its events, so a worker killed right after accepting sends still owes them.
PROVIDERS = """
[providers.slow]
kind = "gym"
class = "responding"
latency_seconds = {latency}

[defaults]
provider = "slow"
"""


class Worker:
    """One ``agentkeep serve --partitions`` child process."""

    def __init__(
        self, home: Path, url: str, *, latency: float, lease: float, extra: tuple[str, ...] = ()
    ) -> None:
        home.mkdir(parents=True, exist_ok=True)
        (home / "providers.toml").write_text(PROVIDERS.format(latency=latency))
        self.log = home.parent / f"{home.name}.log"
        self._log = self.log.open("w")
        self.process = subprocess.Popen(
            [
                *AGENTKEEP,
                "--home",
                str(home),
                "--json",
                "--log-level",
                "info",
                "serve",
                "--port",
                "0",
                "--database",
                url,
                "--partitions",
                str(COUNT),
                "--lease",
                str(lease),
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env={**os.environ, "AGENTKEEP_DAEMON_TOKEN": TOKEN},
        )
        self.url: str = json.loads(first_line(self.process))["url"]
        self.client = httpx.Client(base_url=self.url, headers=HEADERS, timeout=TIMEOUT)

    def health(self) -> dict[str, Any]:
        found: dict[str, Any] = self.client.get("/healthz").json()
        return found

    def partitions(self) -> set[int]:
        return {int(p) for p in self.health().get("coordinator", {}).get("partitions", {})}

    def stop(self) -> None:
        self.client.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        assert self.process.stdout is not None
        self.process.stdout.close()
        self._log.close()


def wait_for(condition: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> float:
    """Poll ``condition`` (a read over a socket) until it holds; the seconds it took."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, f"timed out waiting for {what}"
        time.sleep(0.02)
    return time.monotonic() - started


@pytest.fixture
def workers(postgres_url: str, tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    started: list[Worker] = []

    def start(
        name: str, *, latency: float = 0.05, lease: float = 3.0, extra: tuple[str, ...] = ()
    ) -> Worker:
        worker = Worker(tmp_path / name, postgres_url, latency=latency, lease=lease, extra=extra)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


def split(a: Worker, b: Worker) -> tuple[set[int], set[int]]:
    """Wait until the two workers run two partitions each; theirs."""
    wait_for(
        lambda: len(a.partitions()) == COUNT // 2 and len(b.partitions()) == COUNT // 2,
        "the partitions to split",
    )
    mine, theirs = a.partitions(), b.partitions()
    assert mine | theirs == set(range(COUNT))
    assert not mine & theirs
    return mine, theirs


def post(client: httpx.Client, path: str, body: dict[str, Any]) -> httpx.Response:
    """POST as a client of a cluster does: again after a 503 ``partition_unavailable`` (a
    partition between owners: the workers' rows name a new owner at its next heartbeat)."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        answer = client.post(path, json=body)
        if answer.status_code != 503 or time.monotonic() > deadline:
            return answer
        assert answer.json()["error"]["code"] == "partition_unavailable", answer.text
        time.sleep(0.02)


def send(client: httpx.Client, session: str, key: str, *, wait: bool = True) -> httpx.Response:
    body = {"message": f"hello {key}", "idempotencyKey": key, "wait": wait}
    return post(client, f"/v1/sessions/{session}/messages", body)


def turns(client: httpx.Client, session: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = client.get(f"/v1/sessions/{session}/turns").json()["turns"]
    return found


def test_two_workers_split_the_partitions_and_answer_any_request(
    workers: Callable[..., Worker],
) -> None:
    a, b = workers("a"), workers("b")
    mine, theirs = split(a, b)
    health = a.health()
    assert health["status"] == "ok"
    assert health["coordinator"]["live_workers"] == 2
    # A registry write reaches partition 0's owner through either worker.
    for worker, name in ((a, "helper-a"), (b, "helper-b")):
        created = post(worker.client, "/v1/agents", {"id": name})
        assert created.status_code == 201, created.text
    # Sessions created through either worker, spread over the partitions; each sent a turn
    # through the OTHER worker, and again with the same key through the first.
    sessions: list[str] = []
    for n in range(12):
        via, other = (a, b) if n % 2 == 0 else (b, a)
        made = post(via.client, "/v1/sessions", {"agentId": "helper-a"})
        assert made.status_code == 201, made.text
        session = made.json()["id"]
        sessions.append(session)
        first = send(other.client, session, f"key-{n}")
        assert first.status_code in (200, 202), first.text
        again = send(via.client, session, f"key-{n}")
        assert again.status_code == 200, again.text
        assert again.json()["duplicate"] is True
        assert again.json()["turn"]["id"] == first.json()["turn"]["id"]
    owners = {partition_of(s, COUNT) for s in sessions}
    assert owners & mine
    assert owners & theirs
    # A client-chosen session id lands in its own partition, whichever worker is asked.
    named = post(b.client, "/v1/sessions", {"agentId": "helper-b", "sessionId": "chosen-1"})
    assert named.status_code == 201, named.text
    for session in sessions:
        wait_for(
            lambda s=session: [t["status"] for t in turns(a.client, s)] == ["completed"],
            f"{session}'s one turn to complete",
        )
        assert [t["status"] for t in turns(b.client, session)] == ["completed"]
    listed = {s["id"] for s in b.client.get("/v1/sessions").json()["sessions"]}
    assert set(sessions) | {"chosen-1"} <= listed
    # A session's event stream through the worker that does not own it: forwarded to the
    # owner, every committed event in order (the ids the store's own page gives).
    remote = next(s for s in sessions if partition_of(s, COUNT) in theirs)
    page = a.client.get(f"/v1/sessions/{remote}/events").json()["events"]
    assert page
    seen: list[str] = []
    with connect_sse(a.client, "GET", f"/v1/sessions/{remote}/events/stream") as source:
        assert source.response.status_code == 200
        for frame in source.iter_sse():
            if frame.id:
                seen.append(frame.id)
            if len(seen) == len(page):
                break
    assert seen == [str(event["sequence"]) for event in page]


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM], ids=["kill", "term"])
def test_a_dead_or_leaving_workers_owed_turns_are_finished_by_the_survivor(
    workers: Callable[..., Worker], signum: signal.Signals
) -> None:
    """SIGKILL: the server ends its sessions, the survivor reaps it and takes its partitions
    (well inside the lease). SIGTERM: it leaves gracefully (its partitions drained and
    released) and the survivor takes them over the same way."""
    # Slow turns (a pause before each of their stream events), so the victim owes them when
    # it is killed; a long lease, so the takeover is the server noticing the death.
    survivor, victim = workers("a", latency=0.4, lease=20.0), workers("b", latency=0.4, lease=20.0)
    _, theirs = split(survivor, victim)
    assert post(survivor.client, "/v1/agents", {"id": "helper"}).status_code == 201
    sessions: list[str] = []
    while len([s for s in sessions if partition_of(s, COUNT) in theirs]) < 4:
        made = post(survivor.client, "/v1/sessions", {"agentId": "helper"})
        assert made.status_code == 201, made.text
        sessions.append(made.json()["id"])
    accepted = {}
    for n, session in enumerate(sessions):
        sent = send(survivor.client if n % 2 else victim.client, session, f"owed-{n}", wait=False)
        assert sent.status_code == 202, sent.text
        accepted[session] = sent.json()["turn"]["id"]
    killed = time.monotonic()
    victim.process.send_signal(signum)
    victim.process.wait(TIMEOUT)
    owed = [
        s
        for s in sessions
        if partition_of(s, COUNT) in theirs
        and turns(survivor.client, s)[0]["status"] not in ("completed", "failed", "cancelled")
    ]
    if signum == signal.SIGKILL:
        assert owed, "the victim finished its turns before it was killed: nothing was owed"
    # Clients retry through the survivor with their keys at once, the victim's sessions
    # first: 503 (Retry-After) while their partition has no reachable owner (the dead
    # worker's address refuses, or none is known), then their one turn.
    unavailable = 0
    for n, session in sorted(
        enumerate(sessions), key=lambda p: partition_of(p[1], COUNT) not in theirs
    ):
        while True:
            again = survivor.client.post(
                f"/v1/sessions/{session}/messages",
                json={"message": f"hello owed-{n}", "idempotencyKey": f"owed-{n}", "wait": False},
            )
            if again.status_code != 503:
                break
            unavailable += 1
            assert again.headers["Retry-After"] == "1"
            assert again.json()["error"]["code"] == "partition_unavailable"
            time.sleep(0.02)
        assert again.status_code == 200, again.text
        assert again.json()["duplicate"] is True
        assert again.json()["turn"]["id"] == accepted[session]
    answered = time.monotonic() - killed
    wait_for(lambda: survivor.partitions() == set(range(COUNT)), "the takeover")
    takeover = time.monotonic() - killed
    for session in sessions:
        wait_for(
            lambda s=session: [t["status"] for t in turns(survivor.client, s)] == ["completed"],
            f"{session}'s owed turn to complete",
        )
        assert [t["id"] for t in turns(survivor.client, session)] == [accepted[session]]
    done = time.monotonic() - killed
    print(
        f"{signum.name}: every key answered {answered:.3f} s ({unavailable} x 503), "
        f"all partitions {takeover:.3f} s, owed turns done {done:.3f} s"
    )


def test_a_joining_worker_gets_its_share_by_graceful_hand_off(
    workers: Callable[..., Worker],
) -> None:
    """One worker runs every partition; a second joins while turns are in flight: the first
    hands half over (each partition's system drained, then released), the second opens
    them, and every turn completes once, whichever worker clients send through."""
    first = workers("a", latency=0.1)
    wait_for(lambda: first.partitions() == set(range(COUNT)), "the first worker's partitions")
    assert post(first.client, "/v1/agents", {"id": "helper"}).status_code == 201
    sessions = [
        post(first.client, "/v1/sessions", {"agentId": "helper"}).json()["id"] for _ in range(8)
    ]
    accepted = {}
    for n, session in enumerate(sessions):
        sent = send(first.client, session, f"before-{n}", wait=False)
        assert sent.status_code == 202, sent.text
        accepted[session] = sent.json()["turn"]["id"]
    second = workers("b", latency=0.1)
    mine, theirs = split(first, second)
    assert mine | theirs == set(range(COUNT))
    for n, session in enumerate(sessions):
        again = send(second.client, session, f"before-{n}")  # waits for its end
        assert again.status_code == 200, again.text
        assert again.json()["turn"]["id"] == accepted[session]
        assert again.json()["turn"]["status"] == "completed"
        after = send(second.client if n % 2 else first.client, session, f"after-{n}")
        assert after.status_code == 200, after.text
        assert after.json()["turn"]["status"] == "completed"
    for session in sessions:
        assert [t["status"] for t in turns(second.client, session)] == ["completed"] * 2


def test_partitions_are_refused_on_sqlite(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        ["--home", str(tmp_path / "home"), "serve", "--partitions", "4"],
        env={DATABASE_ENV: None},  # SQLite even on the PostgreSQL pass
    )
    assert result.exit_code == 2, result.output
    assert "PostgreSQL" in result.output
    assert not (tmp_path / "home").exists()
