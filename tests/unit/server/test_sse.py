"""The SSE event stream: backlog then live, ``id`` = sequence, ``Last-Event-ID`` over
``after``, heartbeats, a client that disconnects anywhere and reconnects losing nothing and
seeing nothing twice, and a shutdown that ends open streams within 5 s.

``AGENTKEEP_SSE_SEEDS`` runs the reconnect campaign over more seeds (default 3).
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from pathlib import Path

import httpx
import pytest
from httpx_sse import connect_sse

from .conftest import TIMEOUT, Served, serve

STREAM = "/v1/sessions/{}/events/stream"
SEEDS = range(1, 1 + int(os.environ.get("AGENTKEEP_SSE_SEEDS", "3")))


def _read(client: httpx.Client, session: str, count: int, **request: object) -> list[int]:
    """The sequences of the next ``count`` events, checking each frame."""
    got: list[int] = []
    with connect_sse(client, "GET", STREAM.format(session), **request) as source:  # type: ignore[arg-type]
        assert source.response.status_code == 200
        assert source.response.headers["content-type"].startswith("text/event-stream")
        for frame in source.iter_sse():
            if not frame.data:
                continue  # a heartbeat: httpx_sse dispatches it after an id (browsers do not)
            event = json.loads(frame.data)
            assert frame.id == str(event["sequence"])
            assert frame.event == "message"  # unnamed: a browser's onmessage sees it
            assert event["sessionId"] == session
            got.append(event["sequence"])
            if len(got) == count:
                break
    return got


def test_backlog_then_live_with_the_sequence_as_id(served: Served, client: httpx.Client) -> None:
    agent = served.system.create(id="live1")
    for n in range(5):
        served.system.update_metadata(agent.id, {"n": n})

    def later() -> None:
        for n in range(5, 8):
            served.system.update_metadata(agent.id, {"n": n})

    writer = threading.Timer(0.2, later)
    writer.start()
    try:
        assert _read(client, "live1", 8) == list(range(1, 9))
    finally:
        writer.join(TIMEOUT)
    assert _read(client, "live1", 3, params={"after": 5}) == [6, 7, 8]


def test_last_event_id_wins_over_after(served: Served, client: httpx.Client) -> None:
    agent = served.system.create(id="resume1")
    for n in range(6):
        served.system.update_metadata(agent.id, {"n": n})
    got = _read(client, "resume1", 3, params={"after": 0}, headers={"Last-Event-ID": "3"})
    assert got == [4, 5, 6]
    bad = client.get(STREAM.format("resume1"), headers={"Last-Event-ID": "three"})
    assert bad.status_code == 422
    assert bad.json()["error"]["code"] == "invalid_last_event_id"
    assert client.get(STREAM.format("nosuch")).status_code == 404
    assert client.get(STREAM.format("resume1"), params={"after": -1}).status_code == 422


@pytest.mark.parametrize("seed", SEEDS)
def test_a_client_reconnecting_anywhere_gets_every_event_once_in_order(
    served: Served, seed: int
) -> None:
    """Disconnect after a random number of events (the stream is cut mid-flight while events
    keep committing), reconnect with the last id seen: the union is exactly 1..N, in order."""
    total = 60
    rng = random.Random(seed)
    agent = served.system.create(id=f"seed{seed}")
    for n in range(10):
        served.system.update_metadata(agent.id, {"n": n})

    def write() -> None:
        for n in range(10, total):
            served.system.update_metadata(agent.id, {"n": n})

    writer = threading.Thread(target=write)
    writer.start()
    received: list[int] = []
    connections = 0
    with served.client() as client:
        while len(received) < total:
            headers = {"Last-Event-ID": str(received[-1])} if received else {}
            # A stale ``after`` on the URL, as a browser reconnecting to the same URL sends.
            params = {"after": rng.randint(0, 5)} if received else {}
            chunk = rng.randint(1, 12)
            received += _read(
                client, agent.id, min(chunk, total - len(received)), headers=headers, params=params
            )
            connections += 1
    writer.join(TIMEOUT)
    assert received == list(range(1, total + 1))
    assert connections > 3


def test_heartbeat_comments_keep_an_idle_stream_open(served: Served, client: httpx.Client) -> None:
    served.system.create(id="quiet1")
    comments = 0
    with client.stream("GET", STREAM.format("quiet1")) as response:
        for line in response.iter_lines():
            if line.startswith(":"):
                comments += 1
                if comments == 2:
                    break
    assert comments == 2


def test_the_turn_filter_drops_other_turns_events(served: Served, client: httpx.Client) -> None:
    """Events outside the named turn are not sent (until turns exist, every event has no
    turn: the stream shows heartbeats only)."""
    agent = served.system.create(id="turns1")
    served.system.update_metadata(agent.id, {"n": 1})
    lines: list[str] = []
    with client.stream("GET", STREAM.format("turns1"), params={"turn_id": "t1"}) as response:
        for line in response.iter_lines():
            lines.append(line)
            if sum(1 for seen in lines if seen.startswith(":")) == 2:
                break
    assert not [line for line in lines if line.startswith(("data:", "id:"))]


def _wait_for(condition: object, timeout: float = TIMEOUT) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return True
        time.sleep(0.02)
    return False


def test_a_client_that_leaves_releases_its_stream(served: Served, client: httpx.Client) -> None:
    agent = served.system.create(id="leave1")
    served.system.update_metadata(agent.id, {"n": 1})
    assert _read(client, agent.id, 1) == [1]
    streams = served.server.context.streams
    assert _wait_for(lambda: len(streams) == 0)


def test_shutdown_with_open_streams_finishes_within_5_seconds(tmp_path: Path) -> None:
    """uvicorn would wait for open streams for its whole graceful period (30 s here): the
    server ends them itself."""
    served = serve(tmp_path / "state", graceful_seconds=30)
    try:
        _shutdown_with_open_streams(served)
    finally:
        served.stop()


def _shutdown_with_open_streams(served: Served) -> None:
    agent = served.system.create(id="open1")
    served.system.update_metadata(agent.id, {"n": 1})
    ended: list[list[int]] = []
    opened = threading.Barrier(4)

    def follow() -> None:
        got: list[int] = []
        with (
            served.client() as client,
            connect_sse(client, "GET", STREAM.format(agent.id)) as source,
        ):
            for frame in source.iter_sse():
                if not frame.data:
                    continue  # a heartbeat (see _read)
                got.append(int(frame.id))
                if len(got) == 1:
                    opened.wait(TIMEOUT)
        ended.append(got)

    followers = [threading.Thread(target=follow) for _ in range(3)]
    for thread in followers:
        thread.start()
    opened.wait(TIMEOUT)
    assert len(served.server.context.streams) == 3
    started = time.monotonic()
    assert served.server.stop()
    served.system.shutdown()
    elapsed = time.monotonic() - started
    for thread in followers:
        thread.join(TIMEOUT)
    assert elapsed < 5.0
    assert ended == [[1], [1], [1]]  # each stream ended cleanly (no error in the reader)


def _raw_frames(
    client: httpx.Client, session: str, opened: threading.Event | None = None, **params: object
) -> list[tuple[str | None, dict[str, object]]]:
    """(the frame's own ``id:`` field or None, its event) of every data frame, read from the
    raw SSE text up to the end of a turn; ``opened`` is set once the first frame arrived."""
    frames: list[tuple[str | None, dict[str, object]]] = []
    with client.stream("GET", STREAM.format(session), params=params) as response:  # type: ignore[arg-type]
        assert response.status_code == 200
        frame_id: str | None = None
        data: str | None = None
        for line in response.iter_lines():
            if line.startswith("id:"):
                frame_id = line[3:].strip()
            elif line.startswith("data:"):
                data = line[5:].strip()
            elif line == "" and data is not None:
                event = json.loads(data)
                frames.append((frame_id, event))
                if opened is not None:
                    opened.set()
                frame_id, data = None, None
                if str(event["type"]) in ("turn.completed", "turn.failed"):
                    break
    return frames


def test_live_text_deltas_are_ephemeral_frames_without_an_id(
    served: Served, client: httpx.Client
) -> None:
    from agentkeep.providers import script

    served.model.add(script.text("one two three four", chunks=4))
    agent = served.system.create(id="deltas1")
    served.system.update_metadata(agent.id, {"before": True})  # event 1: the stream is live
    seen: list[list[tuple[str | None, dict[str, object]]]] = []
    opened = threading.Event()

    def follow() -> None:
        with httpx.Client(base_url=served.url, headers=client.headers, timeout=TIMEOUT) as own:
            seen.append(_raw_frames(own, "deltas1", opened))

    reader = threading.Thread(target=follow)
    reader.start()
    assert opened.wait(TIMEOUT)  # it received event 1: it is subscribed before the turn
    served.system.sessions.send(agent.id, "count").wait(timeout_seconds=TIMEOUT)
    reader.join(TIMEOUT)
    frames = seen[0]
    durable = [(i, e) for i, e in frames if e["sequence"] != 0]
    deltas = [(i, e) for i, e in frames if e["sequence"] == 0]
    # Every durable event carries its sequence as the SSE id, densely; no delta has an id.
    assert [i for i, _ in durable] == [str(n) for n in range(1, len(durable) + 1)]
    assert [i for i, _ in deltas] == [None] * len(deltas)
    assert {e["type"] for _, e in deltas} == {"text.delta"}
    assert "".join(str(e["data"]["text"]) for _, e in deltas) == "one two three four"

    # ephemeral=false: the durable events only, the same ones.
    plain = _raw_frames(client, "deltas1", after=0, ephemeral="false")
    assert [e["sequence"] for _, e in plain] == [e["sequence"] for _, e in durable]
