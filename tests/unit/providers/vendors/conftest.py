"""A local HTTP server that speaks each vendor's real wire format (SSE over chunked HTTP/1.1).

Tests queue :class:`Reply` scripts; the server answers each request with the next one and
records what the SDK sent (method, path, headers, exact body bytes). Nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import json
import queue
import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentkeep.providers.protocol import CancelToken
from agentkeep.providers.retry import RetryPolicy


@dataclass
class Reply:
    """One scripted answer.

    ``frames`` are written one HTTP chunk each. ``cut_after`` drops the connection after that
    many frames without the terminating chunk (a mid-stream disconnect); ``hold_after`` stops
    after that many frames and waits for the client to go away (a cancellation test);
    ``release_headers`` delays the whole answer until the test sets it.
    """

    status: int = 200
    frames: list[bytes] = field(default_factory=list)
    json_body: object | None = None
    headers: dict[str, str] = field(default_factory=dict)
    cut_after: int | None = None
    hold_after: int | None = None
    release_headers: threading.Event | None = None  # answer only once this is set


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict[str, object]:
        value = json.loads(self.body)
        assert isinstance(value, dict)
        return value


def sse(event: str | None, data: object) -> bytes:
    """One SSE frame; ``event`` None writes a data-only frame (Chat Completions)."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event is not None else ""
    return f"{head}data: {payload}\n\n".encode()


def typed_sse(*events: dict[str, object]) -> list[bytes]:
    """Frames whose ``event:`` name is the payload's ``type`` (Anthropic, Responses)."""
    return [sse(str(event["type"]), event) for event in events]


class VendorServer:
    """The running server; test modules reach the helpers through it (conftest is not importable
    under ``--import-mode=importlib``)."""

    Reply = Reply
    sse = staticmethod(sse)
    typed_sse = staticmethod(typed_sse)

    def __init__(self) -> None:
        self.replies: queue.Queue[Reply] = queue.Queue()
        self.requests: list[Recorded] = []
        self.client_gone = threading.Event()
        self.holding = threading.Event()
        self.received = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                server.requests.append(
                    Recorded(
                        "POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body
                    )
                )
                try:
                    reply = server.replies.get_nowait()
                except queue.Empty:
                    reply = Reply(status=500, json_body={"error": {"message": "no reply queued"}})
                server.received.set()
                if reply.release_headers is not None:
                    assert reply.release_headers.wait(10), "the test never released the answer"
                self._answer(reply)

            def _answer(self, reply: Reply) -> None:
                self.send_response(reply.status)
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                if reply.json_body is not None:
                    data = json.dumps(reply.json_body).encode()
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for number, frame in enumerate(reply.frames):
                    if reply.cut_after is not None and number == reply.cut_after:
                        self.close_connection = True
                        self.wfile.flush()
                        return
                    if reply.hold_after is not None and number == reply.hold_after:
                        self._hold()
                        return
                    self.wfile.write(f"{len(frame):x}\r\n".encode() + frame + b"\r\n")
                    self.wfile.flush()
                if reply.hold_after is not None and reply.hold_after >= len(reply.frames):
                    self._hold()
                    return
                if reply.cut_after is not None:
                    self.close_connection = True
                    return
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def _hold(self) -> None:
                # Wait for the client to hang up: recv returns b"" (or fails) when it does.
                self.wfile.flush()
                self.close_connection = True
                server.holding.set()
                self.connection.settimeout(20)
                try:
                    while self.connection.recv(1024):
                        pass
                except OSError:
                    pass
                server.client_gone.set()

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: object, client_address: object) -> None:
                # A client that hung up mid-answer is what several tests do on purpose.
                server.handler_errors += 1

        self.handler_errors = 0
        self._httpd = Server(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def queue(self, *replies: Reply) -> None:
        for reply in replies:
            self.replies.put(reply)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


@pytest.fixture
def server() -> Iterator[VendorServer]:
    running = VendorServer()
    running.start()
    try:
        yield running
    finally:
        running.stop()


@dataclass
class SleepRecorder:
    """An injected retry sleep: records each delay, never waits."""

    delays: list[float] = field(default_factory=list)

    def __call__(self, delay_seconds: float, cancel: CancelToken) -> bool:
        self.delays.append(delay_seconds)
        return cancel.cancelled


@pytest.fixture
def sleeps() -> SleepRecorder:
    return SleepRecorder()


@pytest.fixture
def retry_policy(sleeps: SleepRecorder) -> RetryPolicy:
    return RetryPolicy(max_retries=3, rng=random.Random(7), sleep=sleeps)
