"""A session's durable event stream served by a worker that does NOT own the session.

Two ``agentkeep serve --partitions`` processes on a throwaway PostgreSQL, each with an SSE
poll of ten minutes (``--stream-poll 600``): a stream whose events arrive within seconds was
woken by the owner's ``NOTIFY``, not by its poll. The stream (``ephemeral=false``) is read
from the store by the worker it was asked of; it goes on, on the same connection, across a
SIGKILL of the owner and the takeover, with every event once and in order.
"""

from __future__ import annotations

import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import msgspec
import psycopg
import pytest
from httpx_sse import connect_sse
from tests.unit.cluster.test_serve_workers import (
    COUNT,
    HEADERS,
    Worker,
    post,
    send,
    split,
    turns,
    wait_for,
    workers,
)

from agentkeep.partitions import partition_of
from agentkeep.persistence.postgres import parse_url

__all__ = ["workers"]  # the fixture, shared with test_serve_workers

#: Far longer than any wait below: only a wake-up (a NOTIFY) can move these streams.
POLL = ("--stream-poll", "600")
DEADLINE = 30.0


class Stream:
    """One SSE connection to ``worker``, read on a thread of its own into a queue."""

    def __init__(self, worker: Worker, session: str) -> None:
        self.frames: queue.Queue[tuple[int, dict[str, Any]] | None] = queue.Queue()
        self.connected = threading.Event()
        self.error: BaseException | None = None
        self._client = httpx.Client(
            base_url=worker.url, headers=HEADERS, timeout=httpx.Timeout(60.0, read=None)
        )
        path = f"/v1/sessions/{session}/events/stream?ephemeral=false"
        self._thread = threading.Thread(target=self._read, args=(path,), daemon=True)
        self._thread.start()
        assert self.connected.wait(DEADLINE), f"the stream did not open: {self.error!r}"

    def _read(self, path: str) -> None:
        try:
            with connect_sse(self._client, "GET", path) as source:
                assert source.response.status_code == 200, source.response.read()
                self.connected.set()
                for frame in source.iter_sse():
                    if frame.id:
                        self.frames.put((int(frame.id), msgspec.json.decode(frame.data)))
        except BaseException as error:  # the worker stopped: the stream ends
            self.error = error
        finally:
            self.connected.set()
            self.frames.put(None)

    def until(self, done: Callable[[dict[str, Any]], bool], seen: list[int]) -> None:
        """Take frames into ``seen`` until one satisfies ``done`` (within the deadline)."""
        deadline = time.monotonic() + DEADLINE
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"no such event within {DEADLINE} s (seen {seen})"
            try:
                item = self.frames.get(timeout=left)
            except queue.Empty:
                continue
            assert item is not None, f"the stream ended ({self.error!r}) after {seen}"
            sequence, event = item
            seen.append(sequence)
            if done(event):
                return

    def catch_up(self, page: list[int], seen: list[int]) -> None:
        """Take frames until ``seen`` reaches the end of ``page``; then they are equal (every
        durable event once, in order)."""
        if seen[-1] < page[-1]:
            self.until(lambda event: int(event["sequence"]) >= page[-1], seen)
        assert seen == page

    def close(self) -> None:
        self._client.close()
        self._thread.join(DEADLINE)


@pytest.fixture
def streams() -> Iterator[list[Stream]]:
    opened: list[Stream] = []
    yield opened
    for stream in opened:
        stream.close()


def _ended(turn_id: str) -> Callable[[dict[str, Any]], bool]:
    return lambda event: event.get("turnId") == turn_id and event["type"] == "turn.completed"


def _session_of(owner_parts: set[int], via: Worker) -> str:
    """A new session in one of ``owner_parts``."""
    while True:
        made = post(via.client, "/v1/sessions", {"agentId": "helper"})
        assert made.status_code == 201, made.text
        session: str = made.json()["id"]
        if partition_of(session, COUNT) in owner_parts:
            return session


def _page(worker: Worker, session: str) -> list[int]:
    events = worker.client.get(f"/v1/sessions/{session}/events?limit=1000").json()["events"]
    return [int(event["sequence"]) for event in events]


def test_a_non_owner_streams_the_owners_commits_woken_by_notify(
    workers: Callable[..., Worker], streams: list[Stream], postgres_url: str
) -> None:
    a, b = workers("a", extra=POLL), workers("b", extra=POLL)
    _, theirs = split(a, b)
    assert post(a.client, "/v1/agents", {"id": "helper"}).status_code == 201
    session = _session_of(theirs, a)  # owned by b
    stream = Stream(a, session)  # served by a, from the store
    streams.append(stream)
    seen: list[int] = []
    for n in range(3):
        sent = send(b.client, session, f"turn-{n}")
        assert sent.status_code == 200, sent.text
        stream.until(_ended(sent.json()["turn"]["id"]), seen)
    stream.catch_up(_page(a, session), seen)
    wakeups = a.health()["ledger_wakeups"]
    assert wakeups["listening"] is True
    assert wakeups["received"] > 0
    assert wakeups["reconnects"] == 0
    # The serving worker's listening session is terminated: it reconnects by itself, and
    # the stream goes on with the owner's next commits.
    with psycopg.connect(parse_url(postgres_url).conninfo, autocommit=True) as admin:
        ended = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name LIKE %s AND query LIKE 'LISTEN %%'",
            (f"agentkeep pid={a.process.pid} %",),
        ).fetchall()
    assert ended == [(True,)]
    wait_for(lambda: a.health()["ledger_wakeups"]["reconnects"] == 1, "the reconnect")
    sent = send(b.client, session, "after-reconnect")
    assert sent.status_code == 200, sent.text
    stream.until(_ended(sent.json()["turn"]["id"]), seen)
    stream.catch_up(_page(a, session), seen)


def test_a_stream_served_by_a_non_owner_survives_the_owners_death(
    workers: Callable[..., Worker], streams: list[Stream]
) -> None:
    survivor = workers("a", latency=0.3, lease=20.0, extra=POLL)
    victim = workers("b", latency=0.3, lease=20.0, extra=POLL)
    _, theirs = split(survivor, victim)
    assert post(survivor.client, "/v1/agents", {"id": "helper"}).status_code == 201
    session = _session_of(theirs, survivor)
    stream = Stream(survivor, session)
    streams.append(stream)
    seen: list[int] = []
    first = send(victim.client, session, "before")
    assert first.status_code == 200, first.text
    stream.until(_ended(first.json()["turn"]["id"]), seen)
    # A turn in flight when its owner is killed: the survivor takes the partition over and
    # finishes it; the same stream carries the new owner's commits.
    owed = send(victim.client, session, "owed", wait=False)
    assert owed.status_code == 202, owed.text
    owed_turn = owed.json()["turn"]["id"]
    stream.until(lambda event: event.get("turnId") == owed_turn, seen)
    victim.process.send_signal(signal.SIGKILL)
    victim.process.wait(DEADLINE)
    wait_for(lambda: survivor.partitions() == set(range(COUNT)), "the takeover")
    stream.until(_ended(owed_turn), seen)
    after = send(survivor.client, session, "after")
    assert after.status_code == 200, after.text
    stream.until(_ended(after.json()["turn"]["id"]), seen)
    stream.catch_up(_page(survivor, session), seen)  # no event twice, no gap
    assert [t["status"] for t in turns(survivor.client, session)] == ["completed"] * 3
