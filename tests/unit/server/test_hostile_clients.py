"""Clients that try to starve or bloat the daemon.

- slowloris: raw sockets that send half their headers, trickle them, or half a body are
  closed within the configured deadline, while a legitimate request still succeeds;
- past the connection bound a new connection reads a 503 with ``Retry-After`` at once;
- the access log keeps a budget per client;
- 1,000 ``HEAD``, ``OPTIONS`` and vanishing requests leave no thread and no descriptor behind;
- an SSE consumer that never reads is cut off at the byte bound: its buffer is freed, and
  the last frame it receives names the id to resume from; resuming loses nothing.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import h11
import httpx
import pytest
from structlog.testing import capture_logs
from tests.unit.subprocesses import AGENTKEEP

from agentkeep.providers import script
from agentkeep.server.limits import ConnectionLimits, LogBudget

from .conftest import AUTH, TOKEN, Served, serve

STREAM = "/v1/sessions/{}/events/stream"


def _wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    """Poll ``condition`` until it holds or ``seconds`` pass (a bounded wait)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _connect(served: Served, rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(10.0)
    sock.connect(("127.0.0.1", served.server.port))
    return sock


def _head(method: str, path: str, *extra: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", f"Authorization: Bearer {TOKEN}"]
    return ("\r\n".join([*lines, *extra]) + "\r\n\r\n").encode()


def _closed_within(sock: socket.socket, seconds: float) -> float:
    """Read until the server closes; returns how long that took (fails past ``seconds``)."""
    started = time.monotonic()
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return time.monotonic() - started


def _trickle(sock: socket.socket, request: bytes, seconds: float) -> float:
    """Send ``request`` a byte every 50 ms until the server closes; returns how long that took."""
    started = time.monotonic()
    try:
        while time.monotonic() - started < seconds:
            for byte in request:
                sock.sendall(bytes([byte]))
                time.sleep(0.05)  # the pace of the attack, not an ordering
    except OSError:  # the server closed the connection
        return time.monotonic() - started
    return seconds


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[Served]:
    running = serve(
        tmp_path / "state",
        limits=ConnectionLimits(header_timeout_seconds=0.5, body_timeout_seconds=0.5),
    )
    try:
        yield running
    finally:
        running.stop()


def test_slow_clients_are_closed_at_their_deadline_while_others_are_served(
    guarded: Served,
) -> None:
    half_headers = [_connect(guarded) for _ in range(40)]
    for sock in half_headers:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    half_bodies = [_connect(guarded) for _ in range(10)]
    for sock in half_bodies:
        sock.sendall(
            _head("POST", "/v1/agents", "Content-Type: application/json", "Content-Length: 100")
            + b'{"id": '
        )
    silent = [_connect(guarded) for _ in range(10)]
    try:
        with guarded.client() as client:  # 60 slow clients connected: still served
            assert client.get("/healthz").status_code == 200
            assert client.get("/v1/agents").status_code == 200
        for sock in [*half_headers, *half_bodies, *silent]:
            assert _closed_within(sock, 5.0) < 5.0
        # A trickle does not extend the deadline: one byte every 50 ms, closed at ~0.5 s.
        trickler = _connect(guarded)
        assert _trickle(trickler, _head("GET", "/healthz"), 5.0) < 3.0
        trickler.close()
    finally:
        for sock in [*half_headers, *half_bodies, *silent]:
            sock.close()


def test_a_complete_request_is_not_cut_by_the_deadlines(guarded: Served) -> None:
    with guarded.client() as client:
        created = client.post("/v1/agents", json={"id": "ok1", "name": "ok"})
        assert created.status_code == 201, created.text
        assert client.get("/v1/agents/ok1").status_code == 200  # the same connection


def test_connections_past_the_bound_are_refused_at_once(tmp_path: Path) -> None:
    served = serve(
        tmp_path / "state",
        limits=ConnectionLimits(header_timeout_seconds=30.0, max_connections=20),
    )
    idle: list[socket.socket] = []
    try:
        state = served.server._server.server_state
        idle = [_connect(served) for _ in range(20)]
        assert _wait_for(lambda: len(state.connections) == 20)
        extra = _connect(served)  # the refusal comes before anything is read
        answer = b""
        try:
            while chunk := extra.recv(65536):
                answer += chunk
        finally:
            extra.close()
        assert answer.startswith(b"HTTP/1.1 503 ")
        assert b"retry-after: 1" in answer.lower()
        assert b"too_many_connections" in answer
        idle.pop().close()
        assert _wait_for(lambda: len(state.connections) < 20)
        with served.client() as client:
            assert client.get("/healthz").status_code == 200
    finally:
        for sock in idle:
            sock.close()
        served.stop()


def test_the_log_keeps_a_budget_per_client() -> None:
    budget = LogBudget(per_second=0.0, burst=3, clients=2)
    assert [budget.take("a") for _ in range(5)] == [0, 0, 0, None, None]
    assert budget.take("b") == 0  # another client has its own budget
    assert budget.dropped == 2
    refilling = LogBudget(per_second=1000.0, burst=1)
    assert refilling.take("a") == 0
    assert _wait_for(lambda: refilling.take("a") is not None, 2.0)


def test_a_flood_of_requests_cannot_flood_the_access_log(served: Served) -> None:
    budget = served.server.log_budget

    def logged() -> int:
        return len([entry for entry in logs if entry["event"] == "http_request"])

    with capture_logs() as logs, served.client() as client:
        started = time.monotonic()
        for _ in range(400):
            client.get("/healthz")
        # The last line is written just after its response was sent (bounded wait).
        assert _wait_for(lambda: logged() + budget.dropped == 400)
        elapsed = time.monotonic() - started
    # A burst of 100, then 20 a second; the rest dropped and counted.
    assert logged() <= 100 + 20 * elapsed + 1
    assert budget.dropped > 0


def _census() -> tuple[int, int]:
    return threading.active_count(), len(os.listdir("/proc/self/fd"))


def _vanish(served: Served, payload: bytes, read_head: bool) -> None:
    sock = _connect(served)
    try:
        sock.sendall(payload)
        if read_head:
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
    finally:
        sock.close()


def test_no_thread_or_descriptor_outlives_its_request(served: Served) -> None:
    served.system.create(id="leak1")
    stream = STREAM.format("leak1")
    with served.client() as client:

        def round_of(count: int) -> None:
            for n in range(count):
                kind = n % 5
                if kind == 0:
                    assert client.head(stream).status_code == 200
                elif kind == 1:
                    assert client.options(stream).status_code in (200, 204, 405)
                elif kind == 2:  # a stream whose client vanishes once it started
                    _vanish(served, _head("GET", stream), read_head=True)
                elif kind == 3:  # a client that vanishes in the middle of its headers
                    _vanish(served, b"GET /healthz HTTP/1.1\r\nHost: 127", read_head=False)
                else:  # ... or of its body
                    _vanish(
                        served,
                        _head(
                            "POST",
                            "/v1/agents",
                            "Content-Type: application/json",
                            "Content-Length: 50",
                        )
                        + b'{"id":',
                        read_head=False,
                    )

        round_of(50)  # warm up (the worker pool)
        assert _wait_for(lambda: len(served.server.context.streams) == 0)
        threads, fds = _census()
        with capture_logs() as logs:
            round_of(1000)
        # A client that vanishes is not a server error.
        assert not [entry for entry in logs if entry["log_level"] == "error"]
        assert client.get("/healthz").status_code == 200
    streams = served.server.context.streams
    # The last vanished streams end as their disconnects are noticed (bounded wait).
    assert _wait_for(lambda: len(streams) == 0)
    # +2: the worker pool may have grown by a thread or two under the overlap of requests.
    settled = _wait_for(
        lambda: _census()[0] <= threads + 2 and _census()[1] <= fds + 2, seconds=15.0
    )
    assert settled, f"before: {threads} threads, {fds} fds; after: {_census()}"


def _read_response(sock: socket.socket) -> Iterator[bytes]:
    """The body chunks of one HTTP response read from ``sock`` (h11 as a client)."""
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method="GET", target="/", headers=[("Host", "x")]))
    conn.send(h11.EndOfMessage())
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(sock.recv(65536))
        elif isinstance(event, h11.Response):
            assert event.status_code == 200
        elif isinstance(event, h11.Data):
            yield bytes(event.data)
        elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
            return


def _frames(chunks: Iterator[bytes]) -> list[dict[str, str]]:
    text = b"".join(chunks).decode().replace("\r\n", "\n")
    frames = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            name, _, value = line.partition(":")
            if name in ("id", "event", "data"):
                fields[name] = value.removeprefix(" ")
        if "data" in fields:
            frames.append(fields)
    return frames


def test_a_consumer_that_never_reads_is_cut_off_at_the_byte_bound(tmp_path: Path) -> None:
    served = serve(
        tmp_path / "state",
        stream_buffer_bytes=256 * 1024,
        stream_stall_seconds=0.3,
        stream_send_timeout_seconds=60.0,
        heartbeat_seconds=0,
    )
    try:
        agent = served.system.create(id="big1")
        for n in range(100):  # ~10 MB of events: more than the socket buffers hold
            served.system.update_metadata(agent.id, {"blob": "x" * 50_000, "n": n})
        total = served.system.events("big1", after=0, limit=1000)[-1].sequence
        streams = served.server.context.streams
        sock = _connect(served, rcvbuf=4096)
        sock.sendall(_head("GET", STREAM.format("big1")))  # and read nothing
        assert _wait_for(lambda: streams.overflowed == 1, seconds=30.0)
        assert streams.buffered_bytes() == 0  # the buffer's memory is returned
        sock.settimeout(30.0)
        frames = _frames(_read_response(sock))
        sock.close()
        durable = [int(f["id"]) for f in frames if "event" not in f]
        assert durable == list(range(1, len(durable) + 1))  # in order, no gap
        assert len(durable) < total  # cut off before the end
        final = frames[-1]
        assert final["event"] == "resume"
        assert final["id"] == str(durable[-1])
        assert f'"lastEventId":"{durable[-1]}"' in final["data"]
        assert _wait_for(lambda: len(streams) == 0)
        # Resuming from that id sends the rest, nothing twice.
        with served.client() as client:
            rest = client.get(
                "/v1/sessions/big1/events",
                params={"after": durable[-1], "limit": 1000},
                headers=AUTH,
            ).json()["events"]
        assert [e["sequence"] for e in rest] == list(range(durable[-1] + 1, total + 1))
    finally:
        served.stop()


def test_a_reading_consumer_gets_a_large_backlog_whole(tmp_path: Path) -> None:
    served = serve(tmp_path / "state", stream_buffer_bytes=64 * 1024, stream_stall_seconds=2.0)
    try:
        agent = served.system.create(id="big2")
        for n in range(60):
            served.system.update_metadata(agent.id, {"blob": "y" * 20_000, "n": n})
        total = served.system.events("big2", after=0, limit=1000)[-1].sequence
        got: list[int] = []
        with (
            served.client() as client,
            client.stream("GET", STREAM.format("big2")) as response,
        ):
            assert response.status_code == 200
            buffer = ""
            for text in response.iter_text():
                buffer += text
                while "\n\n" in buffer:
                    block, buffer = buffer.split("\n\n", 1)
                    for line in block.split("\n"):
                        if line.startswith("id:"):
                            got.append(int(line[3:]))
                        assert not line.startswith("event: resume")
                if got and got[-1] == total:
                    break
        assert got == list(range(1, total + 1))
    finally:
        served.stop()


def test_raising_the_descriptor_limit(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = (
        "import resource\n"
        "from agentkeep.server.limits import raise_descriptor_limit, connection_bound\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "assert hard != resource.RLIM_INFINITY\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))\n"
        "assert connection_bound(1024) == min(256, hard) // 2\n"
        "after = raise_descriptor_limit()\n"
        "assert after == (hard, hard), (after, hard)\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.strip() == "ok", done.stderr


def test_a_head_on_the_stream_opens_nothing(served: Served) -> None:
    served.system.create(id="head1")
    with served.client() as client:
        for _ in range(20):
            response = client.head(STREAM.format("head1"))
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
        assert client.head(STREAM.format("nosuch")).status_code == 404
        assert len(served.server.context.streams) == 0  # on main: 20, open until shutdown


def _post(served: Served, path: str, body: dict[str, object]) -> socket.socket:
    """A raw POST whose answer nobody reads yet (no client thread waits on it)."""
    payload = json.dumps(body).encode()
    sock = _connect(served)
    sock.sendall(
        _head("POST", path, "Content-Type: application/json", f"Content-Length: {len(payload)}")
        + payload
    )
    return sock


def _threads_in(path_suffix: str) -> int:
    """How many threads are running code of the file ending with ``path_suffix``."""
    count = 0
    for frame in sys._current_frames().values():
        here: object = frame
        while here is not None:
            if here.f_code.co_filename.endswith(path_suffix):  # type: ignore[attr-defined]
                count += 1
                break
            here = here.f_back  # type: ignore[attr-defined]
    return count


def _running_turn(served: Served, client: httpx.Client, session: str) -> str:
    client.post("/v1/agents", json={"id": "helper"})
    started = client.post("/v1/sessions", json={"agentId": "helper", "sessionId": session})
    assert started.status_code in (200, 201), started.text
    served.model.add(script.hang())
    sent = client.post(f"/v1/sessions/{session}/messages", json={"message": "Go.", "wait": False})
    assert sent.status_code == 202
    assert served.model.wait_for_requests(1, timeout_seconds=30)
    turn_id: str = sent.json()["turn"]["id"]
    return turn_id


def test_waiting_requests_hold_no_thread_and_end_when_their_client_leaves(
    served: Served, client: httpx.Client
) -> None:
    turn_id = _running_turn(served, client, "wait1")
    ctx = served.server.context
    waiting = [
        _post(served, "/v1/sessions/wait1/messages", {"message": f"And {n}.", "delivery": "steer"})
        for n in range(30)
    ]
    streams = [_connect(served) for _ in range(20)]
    try:
        for sock in streams:
            sock.sendall(_head("GET", STREAM.format("wait1")))
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        assert _wait_for(lambda: ctx.waiting == 30 and len(ctx.streams) == 20)
        # No OS thread is held by a waiting request (on main: one each, in Turns.wait) nor
        # by a stream (on main: one each, blocked in its Subscription) - a store read in a
        # worker thread may pass through these for a moment (bounded waits: a round trip to
        # a database server, or a reader session opened, makes that moment visible).
        assert _wait_for(lambda: _threads_in("sessions/turning.py") == 0, 5.0)
        assert _wait_for(lambda: _threads_in("server/routes_turns.py") == 0, 5.0)
        assert _wait_for(lambda: _threads_in("persistence/ledger.py") == 0, 5.0)
    finally:
        for sock in [*waiting, *streams]:
            sock.close()
    assert _wait_for(lambda: ctx.waiting == 0 and len(ctx.streams) == 0)  # clients left
    cancelled = client.post("/v1/sessions/wait1/cancel", json={"turnId": turn_id})
    assert cancelled.status_code == 200, cancelled.text


def test_saturation_is_refused_with_retry_after(served: Served, client: httpx.Client) -> None:
    turn_id = _running_turn(served, client, "sat1")
    ctx = served.server.context
    ctx.max_waiting = 2
    ctx.max_streams = 2
    held = [
        _post(served, "/v1/sessions/sat1/messages", {"message": f"And {n}.", "delivery": "steer"})
        for n in range(2)
    ]
    try:
        assert _wait_for(lambda: ctx.waiting == 2)
        events = len(served.system.events("sat1", after=0, limit=1000))
        refused = client.post("/v1/sessions/sat1/messages", json={"message": "More."})
        assert refused.status_code == 503, refused.text
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["code"] == "saturated"
        assert len(served.system.events("sat1", after=0, limit=1000)) == events  # nothing done
        streams = [_connect(served) for _ in range(2)]
        held += streams
        for sock in streams:
            sock.sendall(_head("GET", STREAM.format("sat1")))
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        assert _wait_for(lambda: len(ctx.streams) == 2)
        third = client.get(STREAM.format("sat1"))
        assert third.status_code == 503
        assert third.headers["retry-after"] == "1"
    finally:
        for sock in held:
            sock.close()
    assert _wait_for(lambda: ctx.waiting == 0 and len(ctx.streams) == 0)
    assert client.post("/v1/sessions/sat1/cancel", json={"turnId": turn_id}).status_code == 200


def test_serve_raises_its_soft_descriptor_limit_to_the_hard_one(tmp_path: Path) -> None:
    import resource
    import selectors
    import signal
    import subprocess

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard <= 256:
        pytest.skip(f"the hard descriptor limit ({hard}) leaves nothing to raise")

    def lowered() -> None:  # the child starts with a soft limit of 256
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))

    process = subprocess.Popen(
        [*AGENTKEEP, "--home", str(tmp_path / "home"), "--json", "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "AGENTKEEP_DAEMON_TOKEN": ""},
        preexec_fn=lowered,
    )
    try:
        assert process.stdout is not None
        selector = selectors.DefaultSelector()
        selector.register(process.stdout, selectors.EVENT_READ)
        assert selector.select(30.0), "serve printed nothing"
        selector.close()
        assert json.loads(process.stdout.readline())["pid"] == process.pid
        limits = Path(f"/proc/{process.pid}/limits").read_text()
        line = next(row for row in limits.splitlines() if row.startswith("Max open files"))
        assert line.split()[3:5] == [str(hard), str(hard)]
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
        if process.stdout is not None:
            process.stdout.close()
