"""Over REST: a session whose ``authRef`` cannot be resolved is started and sent to like any
other, and its turn fails naming the reference — never a 5xx."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.unit.server.conftest import AUTH, TIMEOUT, TOKEN

import agentkeep as ak
from agentkeep.server import RunningServer, ServeOptions


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    providers = ak.Providers()
    providers.add("local", ak.ScriptedModel(), kind="gym")
    system = ak.AgentSystem.open(
        tmp_path / "state",
        providers=providers,
        provider="local",
        model="gym-1",
        credentials={"known": "s3cret-value"}.get,
    )
    server = RunningServer(system, ServeOptions(port=0, token=TOKEN, heartbeat_seconds=0.2)).start()
    try:
        yield server.url
    finally:
        server.stop()
        system.close(timeout_seconds=10)


def test_an_unresolvable_auth_ref_fails_the_turn_not_the_request(url: str) -> None:
    with httpx.Client(base_url=url, headers=AUTH, timeout=TIMEOUT) as client:
        definition = {"id": "keyed", "authRef": "vault/missing"}
        assert client.post("/v1/agents", json=definition).status_code == 201
        started = client.post("/v1/sessions", json={"agentId": "keyed", "sessionId": "k1"})
        assert started.status_code == 201, started.text
        sent = client.post("/v1/sessions/k1/messages", json={"message": "hi"})
        assert sent.status_code == 200, sent.text
        turn = sent.json()["turn"]
        assert turn["status"] == "failed", turn
        assert 'authRef "vault/missing" could not be resolved' in turn["error"]["message"]
        assert "no such credential" in turn["error"]["message"]
        events = client.get("/v1/sessions/k1/events").text
        assert "s3cret-value" not in events
