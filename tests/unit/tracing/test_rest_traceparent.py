"""A W3C ``traceparent`` on ``POST /v1/sessions/{id}/messages`` parents the turn it starts
(docs/observability.md, "Traces"): a real daemon on 127.0.0.1, httpx over a real socket."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.server import RunningServer, ServeOptions
from agentkeep.tracing import names

from .conftest import named, parent_of

TOKEN = "test-token-0123456789-abcdefghijklmnop"


class Daemon:
    def __init__(self, home: Path) -> None:
        self.model = ak.ScriptedModel()
        providers = ak.Providers()
        providers.add("local", self.model, kind="gym")
        self.system = ak.AgentSystem.open(
            home, providers=providers, provider="local", model="gym-1"
        )
        try:
            options = ServeOptions(port=0, token=TOKEN, heartbeat_seconds=0.2)
            self.server = RunningServer(self.system, options).start()
        except BaseException:
            self.system.close()
            raise

    def client(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        return httpx.Client(base_url=self.server.url, headers=headers, timeout=30)


@pytest.fixture
def daemon(tmp_path: Path, spans: InMemorySpanExporter) -> Iterator[Daemon]:
    running = Daemon(tmp_path / "state")
    try:
        yield running
    finally:
        running.server.stop()
        running.system.close(timeout_seconds=10)


def test_a_traceparent_on_send_parents_the_turn_and_a_send_without_one_starts_a_trace(
    daemon: Daemon, spans: InMemorySpanExporter
) -> None:
    trace_id, parent_id = secrets.token_hex(16), secrets.token_hex(8)
    with daemon.client() as client:
        assert client.post("/v1/agents", json={"id": "helper"}).status_code in (200, 201)
        created = client.post("/v1/sessions", json={"agentId": "helper", "sessionId": "s1"})
        assert created.status_code in (200, 201), created.text
        daemon.model.add(script.text("Traced."), script.text("Untraced."))
        traced = client.post(
            "/v1/sessions/s1/messages",
            json={"message": "Go."},
            headers={"traceparent": f"00-{trace_id}-{parent_id}-01"},
        )
        assert traced.status_code == 200, traced.text
        assert daemon.system.wait_for_idle("s1", timeout_seconds=10)
        plain = client.post("/v1/sessions/s1/messages", json={"message": "Again."})
        assert plain.status_code == 200, plain.text
        assert daemon.system.wait_for_idle("s1", timeout_seconds=10)

    first, second = sorted(named(spans.get_finished_spans(), names.TURN), key=_start)
    assert first.context.trace_id == int(trace_id, 16)
    assert parent_of(first) == int(parent_id, 16)
    assert first.parent is not None
    assert first.parent.is_remote
    assert first.attributes is not None
    assert first.attributes[names.SESSION_ID] == "s1"
    assert first.attributes[names.DEFINITION_ID] == "helper"
    (request,) = [
        span
        for span in named(spans.get_finished_spans(), names.inference_name("gym-1"))
        if parent_of(span) == first.context.span_id
    ]
    assert request.context.trace_id == int(trace_id, 16)

    assert second.parent is None  # no traceparent: the turn is a trace of its own
    assert second.context.trace_id != int(trace_id, 16)


def _start(span: object) -> int:
    return getattr(span, "start_time", 0) or 0
