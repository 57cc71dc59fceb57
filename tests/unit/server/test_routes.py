"""The REST routes over the registry, sessions and ledger: the wire's names and ISO
timestamps on the wire, the fitting status for every refusal, idempotent session starts."""

from __future__ import annotations

import datetime
import threading

import httpx

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.types import CompactionMessage

from .conftest import TIMEOUT, Served


def _iso(value: str) -> datetime.datetime:
    assert value.endswith("Z")
    return datetime.datetime.fromisoformat(value)


def _code(response: httpx.Response) -> str:
    code: str = response.json()["error"]["code"]
    return code


def test_agents_create_read_patch_delete(client: httpx.Client) -> None:
    created = client.post("/v1/agents", json={"id": "reviewer", "instructions": "Be careful."})
    assert created.status_code == 201
    assert created.headers["location"] == "/v1/agents/reviewer"
    record = created.json()
    assert record["currentRevision"] == 1
    assert record["definition"]["toolbox"] == {"toolIds": [], "actionIds": []}
    assert record["deletedAt"] is None
    assert _iso(record["createdAt"]) == _iso(record["updatedAt"])

    patched = client.patch("/v1/agents/reviewer", json={"toolbox": {"toolIds": ["a", "a"]}})
    assert patched.status_code == 200
    assert patched.json()["currentRevision"] == 2
    assert patched.json()["definition"]["toolbox"]["toolIds"] == ["a"]
    same = client.patch("/v1/agents/reviewer", json={"toolbox": {"toolIds": ["a"]}})
    assert same.json()["currentRevision"] == 2  # equal content keeps the revision

    assert [a["id"] for a in client.get("/v1/agents").json()["agents"]] == ["reviewer"]
    deleted = client.delete("/v1/agents/reviewer")
    assert deleted.status_code == 200
    assert deleted.json()["deletedAt"] is not None
    assert client.get("/v1/agents").json()["agents"] == []
    gone = client.get("/v1/agents/reviewer")
    assert gone.status_code == 410
    assert _code(gone) == "definition_deleted"
    kept = client.get("/v1/agents/reviewer", params={"include_deleted": "true"})
    assert kept.status_code == 200
    listed = client.get("/v1/agents", params={"include_deleted": "true"}).json()["agents"]
    assert [a["id"] for a in listed] == ["reviewer"]


def test_agent_refusals_have_fitting_statuses(client: httpx.Client) -> None:
    client.post("/v1/agents", json={"id": "taken"}).raise_for_status()
    exists = client.post("/v1/agents", json={"id": "taken"})
    assert (exists.status_code, _code(exists)) == (409, "definition_exists")
    invalid = client.post("/v1/agents", json={"id": "Bad Id"})
    assert (invalid.status_code, _code(invalid)) == (422, "invalid_definition")
    assert invalid.json()["error"]["details"]["field"] == "id"
    unknown_field = client.post("/v1/agents", json={"id": "ok", "colour": "red"})
    assert unknown_field.status_code == 422
    assert unknown_field.json()["error"]["details"]["field"] == "colour"
    missing = client.patch("/v1/agents/nobody", json={"name": "x"})
    assert (missing.status_code, _code(missing)) == (404, "unknown_definition")
    bad_query = client.get("/v1/agents", params={"include_deleted": "maybe"})
    assert (bad_query.status_code, _code(bad_query)) == (422, "invalid_query")
    for limit in ("0", "1001", "x", "-1"):
        assert client.get("/v1/agents", params={"limit": limit}).status_code == 422


def test_agents_paginate_by_id(client: httpx.Client) -> None:
    for name in ("a1", "a2", "a3"):
        client.post("/v1/agents", json={"id": name}).raise_for_status()
    first = client.get("/v1/agents", params={"limit": 2}).json()
    assert [a["id"] for a in first["agents"]] == ["a1", "a2"]
    assert first["nextAfter"] == "a2"
    rest = client.get("/v1/agents", params={"limit": 2, "after": "a2"}).json()
    assert [a["id"] for a in rest["agents"]] == ["a3"]
    assert rest["nextAfter"] is None


def test_a_client_chosen_session_id_makes_start_idempotent(client: httpx.Client) -> None:
    client.post("/v1/agents", json={"id": "helper"}).raise_for_status()
    body = {"agentId": "helper", "sessionId": "chat1", "metadata": {"ticket": 7}}
    first = client.post("/v1/sessions", json=body)
    assert first.status_code == 201
    assert first.headers["location"] == "/v1/sessions/chat1"
    again = client.post("/v1/sessions", json=body)
    assert again.status_code == 200
    assert again.json() == first.json()
    other = client.post("/v1/sessions", json={**body, "metadata": {"ticket": 8}})
    assert (other.status_code, _code(other)) == (409, "session_exists")
    session = first.json()
    assert session["agentId"] == "helper"
    assert session["agentRevision"] == 1
    assert session["status"] == "active"
    assert session["archivedAt"] is None


def test_concurrent_identical_starts_make_one_session(client: httpx.Client, served: Served) -> None:
    client.post("/v1/agents", json={"id": "helper"}).raise_for_status()
    body = {"agentId": "helper", "sessionId": "race1"}
    statuses: list[int] = []
    go = threading.Barrier(4)

    def start() -> None:
        with served.client() as own:
            go.wait(TIMEOUT)
            statuses.append(own.post("/v1/sessions", json=body).status_code)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
    assert sorted(statuses) == [200, 200, 200, 201]


def test_session_refusals_and_archive(client: httpx.Client, served: Served) -> None:
    unknown = client.post("/v1/sessions", json={"agentId": "nobody"})
    assert (unknown.status_code, _code(unknown)) == (404, "unknown_definition")
    client.post("/v1/agents", json={"id": "helper"}).raise_for_status()
    bad_id = client.post("/v1/sessions", json={"agentId": "helper", "sessionId": "Not An Id"})
    assert bad_id.status_code == 422
    bad_revision = client.post("/v1/sessions", json={"agentId": "helper", "revisionId": "nope"})
    assert (bad_revision.status_code, _code(bad_revision)) == (404, "unknown_revision")
    assert client.get("/v1/sessions/nosuch").status_code == 404

    session = client.post("/v1/sessions", json={"agentId": "helper"}).json()
    plain = served.system.create(id="plain1")  # an agent without a definition is a session
    listed = client.get("/v1/sessions").json()["sessions"]
    assert {s["id"] for s in listed} == {session["id"], plain.id}
    only = client.get("/v1/sessions", params={"agent_id": "helper"}).json()["sessions"]
    assert [s["id"] for s in only] == [session["id"]]

    archived = client.delete(f"/v1/sessions/{session['id']}")
    assert archived.status_code == 200
    assert archived.json()["status"] == "archived"
    assert [s["id"] for s in client.get("/v1/sessions").json()["sessions"]] == [plain.id]
    everything = client.get("/v1/sessions", params={"include_archived": "1"}).json()
    assert len(everything["sessions"]) == 2
    client.delete("/v1/agents/helper").raise_for_status()
    deleted = client.post("/v1/sessions", json={"agentId": "helper"})
    assert (deleted.status_code, _code(deleted)) == (410, "definition_deleted")


def test_archiving_a_busy_session_is_a_409(client: httpx.Client, served: Served) -> None:
    agent = served.system.create(id="busy1")
    # Queued without starting: the session owes work, durably.
    served.system.internals.accept(agent.id, "send", ak.user("hello"), start=False)
    busy = client.delete("/v1/sessions/busy1")
    assert (busy.status_code, _code(busy)) == (409, "session_busy")


def test_events_and_the_conversation_view_after_a_turn(
    client: httpx.Client, served: Served
) -> None:
    client.post("/v1/agents", json={"id": "helper"}).raise_for_status()
    session = client.post("/v1/sessions", json={"agentId": "helper", "sessionId": "talk1"})
    served.model.add(script.text("Fine."))
    served.system.send("talk1", ak.user("What is up?"))
    assert served.system.wait_for_idle("talk1", timeout_seconds=TIMEOUT)
    assert session.status_code == 201

    page = client.get("/v1/sessions/talk1/events").json()
    events = page["events"]
    assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))
    types = [e["type"] for e in events]
    assert types[:2] == ["turn.queued", "message.accepted"]
    assert "turn.completed" in types
    assert events[0]["id"] == "talk1:1"
    assert events[0]["sessionId"] == "talk1"
    assert page["nextAfter"] is None
    two = client.get("/v1/sessions/talk1/events", params={"after": 1, "limit": 2}).json()
    assert [e["sequence"] for e in two["events"]] == [2, 3]
    assert two["nextAfter"] == 3
    assert client.get("/v1/sessions/talk1/events", params={"limit": 1001}).status_code == 422
    assert client.get("/v1/sessions/nosuch/events").status_code == 404

    messages = client.get("/v1/sessions/talk1/messages").json()
    assert messages["sessionId"] == "talk1"
    roles = [m["role"] for m in messages["messages"]]
    assert roles == ["user", "assistant"]
    assert messages["messages"][0]["content"] == [{"type": "text", "text": "What is up?"}]


def test_compact_is_accepted_or_waited_for(client: httpx.Client, served: Served) -> None:
    served.system.create(id="comp1")
    served.model.add(script.text("hi"))
    summary = CompactionMessage(content="summary")
    served.model.add_compactions(*[script.compacted(summary, summary="summary")] * 2)
    served.system.send("comp1", ak.user("hello"))
    assert served.system.wait_for_idle("comp1", timeout_seconds=TIMEOUT)
    asked = client.post("/v1/sessions/comp1/compact")
    assert asked.status_code == 202
    assert asked.json() == {"sessionId": "comp1", "status": "requested"}
    assert client.post("/v1/sessions/nosuch/compact", json={}).status_code == 404
    assert client.post("/v1/sessions/comp1/compact", json={"wait": "yes"}).status_code == 422
    # Waited for: what it did (what `agentkeep compact` prints through a daemon).
    waited = client.post("/v1/sessions/comp1/compact", json={"wait": True})
    assert waited.status_code == 200, waited.text
    body = waited.json()
    assert (body["status"], body["messages"], body["state"]) == ("completed", 1, "idle")
    assert body["messages"] == len(served.system.transcript("comp1"))
