"""Bad input at the edges and the store file under a running daemon.

- JSON nested ~1,000 deep is a 400 (``json_too_deep``) on a kept connection, not a 500;
- the access log records a 500 as 500 (not 0);
- a non-ASCII ``Idempotency-Key`` header is a 400 (``invalid_header``);
- the database file deleted under the daemon: the next write is a 503 ``store_replaced``,
  and ``/healthz`` answers 503 from then on.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from agentkeep.registry import Registry

from .conftest import Served

DEEP = 1000


def _nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


@pytest.mark.parametrize("route", ["agents", "messages", "sessions"])
def test_deeply_nested_json_is_a_400(served: Served, client: httpx.Client, route: str) -> None:
    client.post("/v1/agents", json={"id": "helper"}).raise_for_status()
    client.post("/v1/sessions", json={"agentId": "helper", "sessionId": "s1"}).raise_for_status()
    paths = {"agents": "/v1/agents", "messages": "/v1/sessions/s1/messages"}
    paths["sessions"] = "/v1/sessions"
    body = '{"id": "deep", "metadata": ' + _nested(DEEP) + "}"
    if route == "messages":
        body = '{"message": "hi", "metadata": ' + _nested(DEEP) + "}"
    answer = client.post(paths[route], content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "json_too_deep"
    assert client.get("/v1/agents").status_code == 200  # the connection and server are fine
    # A moderately nested body is still read as it is.
    shallow = client.post("/v1/agents", json={"id": "nested", "metadata": {"x": [[[{"y": [1]}]]]}})
    assert shallow.status_code == 201, shallow.text


def test_the_access_log_records_a_500_as_500(
    served: Served, client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug nobody anticipated")

    monkeypatch.setattr(Registry, "list", broken)
    with capture_logs() as logs:
        answer = client.get("/v1/agents")
    assert answer.status_code == 500
    assert answer.json()["error"]["code"] == "internal_error"
    lines = [line for line in logs if line.get("event") == "http_request"]
    assert [(line["path"], line["status"]) for line in lines] == [("/v1/agents", 500)]


def test_a_non_ascii_idempotency_key_header_is_refused(
    served: Served, client: httpx.Client
) -> None:
    client.post("/v1/agents", json={"id": "helper"}).raise_for_status()
    client.post("/v1/sessions", json={"agentId": "helper", "sessionId": "s2"}).raise_for_status()
    answer = client.post(
        "/v1/sessions/s2/messages",
        json={"message": "hi", "wait": False},
        headers={"Idempotency-Key": "ключ-1".encode()},
    )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_header"
    assert "Idempotency-Key" in error["message"]
    assert client.get("/v1/sessions/s2/turns").json()["turns"] == []  # no turn was made


@pytest.mark.sqlite_only(
    "deletes SQLite's database file under the daemon; a server that goes away is "
    "test_database_server_down.py"
)
def test_a_deleted_store_file_stops_the_daemon_acknowledging(
    served: Served, client: httpx.Client
) -> None:
    assert client.post("/v1/agents", json={"id": "kept"}).status_code == 201
    assert client.get("/healthz").status_code == 200
    os.unlink(served.system.internals.store.path)
    answer = client.post("/v1/agents", json={"id": "lost"})
    assert answer.status_code == 503, answer.text
    error = answer.json()["error"]
    assert error["code"] == "store_replaced"
    assert "deleted" in error["message"]
    again = client.post("/v1/agents", json={"id": "lost2"})
    assert again.status_code == 503
    health = client.get("/healthz")
    assert health.status_code == 503
    assert health.json()["error"]["code"] == "store_replaced"
