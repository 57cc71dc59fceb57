"""Turns on a real vendor adapter (OpenAI Chat Completions, configured in providers.toml)
against a local HTTP server: a refusing or dead vendor fails the turn with exit 5 and shows
its retries, ``--timeout`` bounds the whole wait, ``--provider`` alone switches to the
provider's default model, and a vendor agent gets the demo tools only when asked."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openai")

ANSWER = "Hello from the vendor."


class WireServer:
    """Answers every Chat Completions request with ``status`` (503: overloaded) or, at 200,
    one streamed text answer in the real SSE wire format; records each request body."""

    def __init__(self) -> None:
        self.status = 200
        self.bodies: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                server.bodies.append(json.loads(self.rfile.read(length)))
                if server.status != 200:
                    data = json.dumps({"error": {"message": "overloaded", "type": "x"}}).encode()
                    self.send_response(server.status)
                    self.send_header("content-type", "application/json")
                else:
                    data = b"".join(_sse(chunk) for chunk in _text_chunks(ANSWER))
                    data += b"data: [DONE]\n\n"
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def _sse(chunk: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(chunk)}\n\n".encode()


def _text_chunks(text: str) -> list[dict[str, Any]]:
    def chunk(delta: dict[str, Any] | None, finish: str | None = None) -> dict[str, Any]:
        choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
        usage = {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1760000000,
            "model": "gpt-test",
            "choices": choices,
            "usage": usage if delta is None else None,
        }

    return [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": text}),
        chunk({}, finish="stop"),
        chunk(None),
    ]


@pytest.fixture
def wire() -> Iterator[WireServer]:
    server = WireServer()
    try:
        yield server
    finally:
        server.stop()


def closed_port_url() -> str:
    """A port nothing listens on: connections are refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def write_providers(home: Path, base_url: str, *, max_retries: int | None = 2) -> None:
    retries = "" if max_retries is None else f"max_retries = {max_retries}\n"
    (home / "providers.toml").write_text(
        f"""
[providers.vendor]
kind = "codex"
class = "openai-compatible"
base_url = "{base_url}"
model = "openai/gpt-test"
{retries}
[providers.toolful]
kind = "codex"
class = "openai-compatible"
base_url = "{base_url}"
model = "openai/gpt-test"
demo_tools = true
"""
    )


def created(invoke: Any, agent_id: str = "a1") -> None:
    result = invoke("session", "start", "--id", agent_id)
    assert result.exit_code == 0, result.stderr


def shown(invoke: Any, agent_id: str = "a1") -> dict[str, Any]:
    result = invoke("session", "show", agent_id, json_mode=True)
    assert result.exit_code == 0, result.stderr
    value: dict[str, Any] = json.loads(result.stdout)["runtime"]
    return value


def test_a_refusing_vendor_shows_its_retries_and_the_failed_turn_exits_5(
    invoke: Any, home: Path, wire: WireServer
) -> None:
    created(invoke)
    write_providers(home, wire.url, max_retries=2)
    wire.status = 503
    result = invoke("session", "send", "a1", "hello?", "--provider", "vendor", "--wait")
    assert result.exit_code == 5, (result.stdout, result.stderr)
    assert result.stdout == ""
    retries = [line for line in result.stderr.splitlines() if line.startswith("retrying")]
    assert [line.split(":")[0] for line in retries] == ["retrying (1)", "retrying (2)"]
    assert len(wire.bodies) == 3  # the first attempt and two retries
    assert 'of session "a1" failed:' in result.stderr
    assert "(after 3 attempts)" in result.stderr
    # Nothing is lost: the question stays owed, for `resume` to ask again.
    after = shown(invoke)
    assert after["state"] == "owes_work"
    assert after["settings"]["provider"] == "vendor"


def test_a_dead_vendor_fails_talk_with_exit_5_and_prints_the_failure(
    invoke: Any, home: Path
) -> None:
    created(invoke)
    write_providers(home, closed_port_url(), max_retries=1)
    result = invoke("talk", "a1", "anyone there?", "--provider", "vendor", json_mode=True)
    assert result.exit_code == 5, (result.stdout, result.stderr)
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert events[-1]["event"] == "response_done"
    assert events[-1]["state"] == "error"
    lines = [json.loads(line) for line in result.stderr.splitlines()]
    assert [e["attempt"] for e in lines if e.get("event") == "retrying"] == [1]
    error = lines[-1]["error"]
    assert error["code"] == "turn_failed"
    assert "(after 2 attempts)" in error["message"]


def test_timeout_bounds_the_whole_wait_on_a_vendor_that_keeps_retrying(
    invoke: Any, home: Path
) -> None:
    created(invoke)
    # The default policy: ten retries, backing off up to 30 s (over a minute in all).
    write_providers(home, closed_port_url(), max_retries=None)
    started = time.monotonic()
    result = invoke(
        "session", "send", "a1", "hello?", "--provider", "vendor", "--wait", "--timeout", "1"
    )
    elapsed = time.monotonic() - started
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert elapsed < 6.0, elapsed  # the wait, then a prompt stop: not the retries' minute
    assert "after 1s; it was stopped and stays owed." in result.stderr
    assert "retrying (1)" in result.stderr
    after = shown(invoke)
    assert after["state"] == "owes_work"  # stopped, not dropped: `resume` continues it


def test_provider_alone_switches_to_its_configured_default_model(
    invoke: Any, home: Path, wire: WireServer
) -> None:
    created(invoke)
    write_providers(home, wire.url)
    first = invoke("session", "send", "a1", "What is 1 + 1?", "--wait")
    assert first.stdout.strip() == "1 + 1 = 2."  # on the default demo model
    result = invoke("session", "send", "a1", "hi", "--provider", "vendor", "--wait")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == ANSWER
    assert [body["model"] for body in wire.bodies] == ["openai/gpt-test"]  # not demo-1
    assert shown(invoke)["settings"]["model"] == "openai/gpt-test"


def test_a_provider_without_a_default_model_needs_model(
    invoke: Any, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    created(invoke)
    monkeypatch.setenv("AGENTKEEP_TEST_KEY", "sk-test")
    (home / "providers.toml").write_text(
        '[providers.bare]\nkind = "codex"\nclass = "openai"\n'
        'base_url = "http://127.0.0.1:9/v1"\napi_key_env = "AGENTKEEP_TEST_KEY"\n'
    )
    result = invoke("session", "send", "a1", "hi", "--provider", "bare", json_mode=True)
    assert result.exit_code == 2
    error = json.loads(result.stderr)["error"]
    assert error["code"] == "no_default_model"
    assert "[providers.bare]" in error["hint"]
    assert shown(invoke)["queued"] == []  # refused before anything was queued


def test_a_vendor_agent_gets_the_demo_tools_only_when_asked(
    invoke: Any, home: Path, wire: WireServer
) -> None:
    created(invoke, "plain")
    created(invoke, "tooled")
    write_providers(home, wire.url)
    plain = invoke("session", "send", "plain", "hi", "--provider", "vendor", "--wait")
    assert plain.exit_code == 0, plain.stderr
    tooled = invoke("session", "send", "tooled", "hi", "--provider", "toolful", "--wait")
    assert tooled.exit_code == 0, tooled.stderr
    offered = [[t["function"]["name"] for t in body.get("tools") or ()] for body in wire.bodies]
    assert offered[0] == []
    assert {"calculator", "word_count", "save_note"} <= set(offered[1])
