"""Ids as clients make them, over REST: a session id or message id of the
id rule (docs/decisions.md) is accepted; a bad one is a 422 ``invalid_id`` saying which id, with
``details.field``; ``/v1/openapi.json`` states the pattern on path parameters and body fields."""

from __future__ import annotations

import uuid

import httpx

from agentkeep.providers import script

from .conftest import Served

PATTERN = r"^(?!\.\.?$)[a-z0-9._-]{1,128}$"  # "." and ".." refused too


def test_sessions_and_messages_take_seed_002_ids(served: Served, client: httpx.Client) -> None:
    assert client.post("/v1/agents", json={"id": "reviewer"}).status_code == 201
    for session_id in ("review-2024", "order-123", str(uuid.uuid4())):
        started = client.post("/v1/sessions", json={"agentId": "reviewer", "sessionId": session_id})
        assert started.status_code == 201, started.text
        assert started.headers["location"] == f"/v1/sessions/{session_id}"
        assert client.get(f"/v1/sessions/{session_id}").json()["id"] == session_id
    served.model.add(script.text("Shipped."))
    body = {"message": "Ship it.", "messageId": "txn-mail"}
    sent = client.post("/v1/sessions/order-123/messages", json=body)
    assert sent.status_code == 200, sent.text
    again = client.post("/v1/sessions/order-123/messages", json=body)
    assert again.json()["duplicate"] is True
    turn_id = sent.json()["turn"]["id"]
    assert client.get(f"/v1/sessions/order-123/turns/{turn_id}").status_code == 200


def test_a_bad_id_is_a_422_saying_which_and_naming_the_field(
    served: Served, client: httpx.Client
) -> None:
    assert client.post("/v1/agents", json={"id": "reviewer"}).status_code == 201
    assert client.post("/v1/sessions", json={"agentId": "reviewer", "sessionId": "s1"}).is_success
    for bad in ("Review-2024", "x" * 129, "..", ".", ""):
        started = client.post("/v1/sessions", json={"agentId": "reviewer", "sessionId": bad})
        error = started.json()["error"]
        assert (started.status_code, error["code"]) == (422, "invalid_id"), started.text
        assert error["details"]["field"] == "sessionId"
        assert error["message"].startswith("session id "), error
        sent = client.post("/v1/sessions/s1/messages", json={"message": "x", "messageId": bad})
        error = sent.json()["error"]
        assert (sent.status_code, error["code"]) == (422, "invalid_id"), sent.text
        assert error["details"]["field"] == "messageId"
        assert error["message"].startswith("message id "), error
    listed = client.get("/v1/sessions").json()["sessions"]
    assert [s["id"] for s in listed] == ["s1"]
    assert client.get("/v1/sessions/s1/turns").json()["turns"] == []


def test_the_document_states_the_pattern(client: httpx.Client) -> None:
    document = client.get("/v1/openapi.json").json()
    components = document["components"]["schemas"]
    for path, operations in document["paths"].items():
        for operation in operations.values():
            for parameter in operation["parameters"]:
                if parameter["in"] == "path":
                    assert parameter["schema"]["pattern"] == PATTERN, (path, parameter)
                    assert "1-128 lowercase letters" in parameter["description"]
    fields = [
        ("StartSession", "sessionId"),
        ("StartSession", "agentId"),
        ("SendMessage", "messageId"),
        ("DefinitionInput", "id"),
    ]
    for schema, field in fields:
        declared = components[schema]["properties"][field]
        options = declared.get("anyOf", [declared])
        assert any(o.get("pattern") == PATTERN for o in options), (schema, field, declared)
