"""The auth matrix: every route that needs the token (every /v1 route, and /metrics) × every
way of not sending the token → the canonical 401, never a 200 or a 500; the right token in
each accepted form → not a 401.

The routes come from the app's own route table, so a route added later is in the matrix
without editing this file.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from agentkeep.server.app import operations
from agentkeep.server.openapi import Operation

from .conftest import TOKEN, Served

V1 = [op for op in operations() if op.auth]

WRONG: dict[str, dict[str, Any]] = {
    "no token": {},
    "wrong token": {"headers": {"Authorization": "Bearer not-the-token-0123456789"}},
    "truncated token": {"headers": {"Authorization": f"Bearer {TOKEN[:-1]}"}},
    "wrong token in x-amalgm-runtime-token": {"headers": {"x-amalgm-runtime-token": TOKEN + "x"}},
    "wrong scheme (Basic)": {"headers": {"Authorization": f"Basic {TOKEN}"}},
    "wrong scheme (Token)": {"headers": {"Authorization": f"Token {TOKEN}"}},
    "no scheme": {"headers": {"Authorization": TOKEN}},
    "token in another header": {"headers": {"X-Api-Key": TOKEN, "Cookie": f"token={TOKEN}"}},
    "token in the URL": {"params": {"token": TOKEN, "access_token": TOKEN}},
}
RIGHT: dict[str, dict[str, str]] = {
    "Bearer": {"Authorization": f"Bearer {TOKEN}"},
    "scheme in any case": {"Authorization": f"bEaReR {TOKEN}"},
    "x-amalgm-runtime-token": {"x-amalgm-runtime-token": TOKEN},
}
BODIES = {
    "createAgent": {"id": "made-by-auth"},
    "updateAgent": {"description": "patched"},
    "startSession": {"agentId": "auth-agent"},
    "compactSession": {},
    "sendMessage": {"message": "hello", "wait": False},
    "cancelTurn": {},
}


def _request(op: Operation) -> dict[str, Any]:
    path = op.path.replace("{id}", "auth-agent" if "agents" in op.path else "authsession")
    path = path.replace("{turn_id}", "noturn")
    request: dict[str, Any] = {"method": op.method, "url": path}
    if op.operation_id in BODIES:
        request["json"] = BODIES[op.operation_id]
    return request


def _send(client: httpx.Client, op: Operation, **extra: Any) -> httpx.Response:
    request = _request(op)
    headers = extra.pop("headers", {})
    if op.operation_id == "streamEvents":
        with client.stream(**request, headers=headers, **extra) as response:
            response.close()  # the status line is what is judged; do not follow the stream
            return response
    return client.request(**request, headers=headers, **extra)


@pytest.fixture(scope="module")
def prepared(shared: Served) -> Served:
    with shared.client() as client:
        client.post("/v1/agents", json={"id": "auth-agent"}).raise_for_status()
        client.post(
            "/v1/sessions", json={"agentId": "auth-agent", "sessionId": "authsession"}
        ).raise_for_status()
    return shared


@pytest.mark.parametrize("op", V1, ids=[f"{op.method} {op.path}" for op in V1])
def test_every_wrong_credential_gets_the_canonical_401(prepared: Served, op: Operation) -> None:
    with prepared.client(auth=False) as client:
        for name, extra in WRONG.items():
            response = _send(client, op, **dict(extra))
            assert response.status_code == 401, (name, response.status_code)
            assert response.headers["www-authenticate"] == "Bearer"
            if op.operation_id != "streamEvents":
                body = response.json()
                assert body["error"]["code"] == "unauthorized", name
                assert body["error"]["details"] == {}
                assert set(body) == {"error"}
                assert TOKEN not in response.text


@pytest.mark.parametrize("op", V1, ids=[f"{op.method} {op.path}" for op in V1])
def test_the_right_token_in_each_accepted_form_is_let_through(
    prepared: Served, op: Operation
) -> None:
    with prepared.client(auth=False) as client:
        for name, headers in RIGHT.items():
            response = _send(client, op, headers=headers)
            assert response.status_code != 401, name
            assert response.status_code < 500, (name, response.status_code)


def test_the_matrix_covers_every_v1_route() -> None:
    assert len(V1) >= 18
    assert {op.operation_id for op in V1} >= {
        "listAgents",
        "createAgent",
        "getAgent",
        "updateAgent",
        "deleteAgent",
        "listSessions",
        "startSession",
        "getSession",
        "archiveSession",
        "listEvents",
        "streamEvents",
        "metrics",
        "getMessages",
        "compactSession",
        "openapi",
        "sendMessage",
        "listTurns",
        "getTurn",
        "cancelTurn",
    }


def test_healthz_needs_no_token_and_says_nothing_more(prepared: Served) -> None:
    with prepared.client(auth=False) as client:
        response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_an_unknown_v1_path_is_a_401_before_it_is_a_404(prepared: Served) -> None:
    """Without the token nothing says which routes exist."""
    with prepared.client(auth=False) as client:
        assert client.get("/v1/no-such-route").status_code == 401
    with prepared.client() as client:
        response = client.get("/v1/no-such-route")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
