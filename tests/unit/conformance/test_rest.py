"""Seed 002's REST.md, DEFINITIONS.md and DATA_MODEL.md, driven with httpx over a real socket
against ``agentkeep serve`` as a subprocess (its own CLI, its default local demo model)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse
from tests.unit.conformance.seed002 import (
    DEFINITION_EXAMPLE,
    SEND_EXAMPLE,
    Daemon,
    is_agent_message,
    is_error,
    serving,
    text_of,
)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    with serving(tmp_path_factory.mktemp("rest") / "state") as running:
        yield running


@pytest.fixture
def api(daemon: Daemon) -> Iterator[httpx.Client]:
    with daemon.client() as client:
        yield client


def a_session(api: httpx.Client, agent_id: str, **start: Any) -> dict[str, Any]:
    """Create definition ``agent_id`` (the demo model) and start a session of it."""
    created = api.post("/v1/agents", json={"id": agent_id, "name": agent_id.title()})
    assert created.status_code == 201, created.text
    started = api.post("/v1/sessions", json={"agentId": agent_id, **start})
    assert started.status_code in (200, 201), started.text
    session: dict[str, Any] = started.json()
    return session


# -- REST.md: authentication and health ------------------------------------------------------
def test_healthz_is_unauthenticated_and_minimal(daemon: Daemon) -> None:
    response = httpx.get(f"{daemon.url}/healthz", timeout=10)
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong-token"}, {"x-amalgm-runtime-token": "wrong"}],
    ids=["none", "wrong-bearer", "wrong-runtime-token"],
)
def test_v1_without_the_token_is_the_canonical_401(daemon: Daemon, headers: dict[str, str]) -> None:
    response = httpx.get(f"{daemon.url}/v1/agents", headers=headers, timeout=10)
    is_error(response, 401)


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
def test_bearer_scheme_is_case_insensitive(daemon: Daemon, scheme: str) -> None:
    headers = {"Authorization": f"{scheme} {daemon.token}"}
    assert httpx.get(f"{daemon.url}/v1/agents", headers=headers, timeout=10).status_code == 200


def test_the_runtime_token_header_is_accepted(daemon: Daemon) -> None:
    headers = {"x-amalgm-runtime-token": daemon.token}
    assert httpx.get(f"{daemon.url}/v1/agents", headers=headers, timeout=10).status_code == 200


# -- DEFINITIONS.md through /v1/agents --------------------------------------------------------
def test_the_definition_example_round_trips_verbatim(api: httpx.Client) -> None:
    created = api.post("/v1/agents", json=DEFINITION_EXAMPLE)
    assert created.status_code == 201, created.text
    record = created.json()
    assert record["definition"] == DEFINITION_EXAMPLE
    assert record["currentRevision"] == 1
    assert record["deletedAt"] is None
    read = api.get("/v1/agents/reviewer")
    assert read.status_code == 200
    assert read.json()["definition"] == DEFINITION_EXAMPLE
    assert "reviewer" in {a["id"] for a in api.get("/v1/agents").json()["agents"]}


def test_a_used_id_cannot_be_created_again(api: httpx.Client) -> None:
    body = {**DEFINITION_EXAMPLE, "id": "twice"}
    assert api.post("/v1/agents", json=body).status_code == 201
    is_error(api.post("/v1/agents", json=body), 409)


def test_patch_merges_known_nested_objects_by_field(api: httpx.Client) -> None:
    body = {**DEFINITION_EXAMPLE, "id": "patched"}
    assert api.post("/v1/agents", json=body).status_code == 201
    patched = api.patch("/v1/agents/patched", json={"resources": {"skills": ["security"]}})
    assert patched.status_code == 200, patched.text
    record = patched.json()
    # "a patch containing only resources.skills preserves files and subagent references"
    assert record["definition"]["resources"] == {
        "files": ["AGENTS.md"],
        "skills": ["security"],
        "subagents": ["security-reviewer"],
    }
    assert record["currentRevision"] == 2


def test_equal_content_keeps_the_revision_and_returning_makes_a_new_one(
    api: httpx.Client,
) -> None:
    body = {**DEFINITION_EXAMPLE, "id": "timeline"}
    assert api.post("/v1/agents", json=body).status_code == 201
    same = api.patch("/v1/agents/timeline", json={"name": "Reviewer"})
    assert same.json()["currentRevision"] == 1
    changed = api.patch("/v1/agents/timeline", json={"name": "Other"})
    assert changed.json()["currentRevision"] == 2
    back = api.patch("/v1/agents/timeline", json={"name": "Reviewer"})
    assert back.json()["currentRevision"] == 3  # the timeline stays append-only


def test_arrays_are_authoritative_and_deduplicated_and_null_clears(api: httpx.Client) -> None:
    body = {**DEFINITION_EXAMPLE, "id": "arrays"}
    assert api.post("/v1/agents", json=body).status_code == 201
    patch = {"toolbox": {"actionIds": ["b", "a", "b"]}, "model": None, "authRef": None}
    definition = api.patch("/v1/agents/arrays", json=patch).json()["definition"]
    assert definition["toolbox"] == {"toolIds": ["git"], "actionIds": ["b", "a"]}
    assert definition["model"] is None
    assert definition["authRef"] is None


def test_delete_is_a_tombstone_and_the_id_stays_reserved(api: httpx.Client) -> None:
    body = {**DEFINITION_EXAMPLE, "id": "gone"}
    assert api.post("/v1/agents", json=body).status_code == 201
    assert api.delete("/v1/agents/gone").status_code == 200
    assert "gone" not in {a["id"] for a in api.get("/v1/agents").json()["agents"]}
    listed = api.get("/v1/agents", params={"include_deleted": "true"}).json()["agents"]
    (tombstone,) = [a for a in listed if a["id"] == "gone"]
    assert tombstone["deletedAt"] is not None
    is_error(api.get("/v1/agents/gone"), 410)  # a tombstone: gone, not unknown
    shown = api.get("/v1/agents/gone", params={"include_deleted": "true"})
    assert shown.status_code == 200
    is_error(api.post("/v1/agents", json=body), 409)


def test_seed_ids_with_hyphens_dots_and_uuids_are_accepted(api: httpx.Client) -> None:
    for agent_id in ("review-2024", "team.reviewer_v2", "0f8fad5b-d9cb-469f-a165-70867728950e"):
        created = api.post("/v1/agents", json={**DEFINITION_EXAMPLE, "id": agent_id})
        assert created.status_code == 201, created.text


# -- REST.md: sessions and turns --------------------------------------------------------------
def test_the_send_example_runs_a_turn_to_its_end(api: httpx.Client) -> None:
    session = a_session(api, "sender")
    assert session["agentId"] == "sender"
    assert session["agentRevision"] == 1
    assert session["status"] == "active"
    sent = api.post(f"/v1/sessions/{session['id']}/messages", json=SEND_EXAMPLE)
    assert sent.status_code == 200, sent.text
    body = sent.json()
    assert body["duplicate"] is False
    turn = body["turn"]
    assert turn["status"] == "completed"
    assert turn["idempotencyKey"] == "review-001"
    assert is_agent_message(turn["input"], "user") == [
        {"type": "text", "text": "Review the current diff."}
    ]
    is_agent_message(turn["result"]["message"], "assistant")
    assert text_of(turn["result"]["message"])
    for stamp in ("createdAt", "startedAt", "completedAt"):
        assert turn[stamp].endswith("Z"), turn  # ISO 8601, UTC


def test_repeating_a_key_returns_its_turn_and_another_message_is_refused(
    api: httpx.Client,
) -> None:
    session = a_session(api, "repeater")
    path = f"/v1/sessions/{session['id']}/messages"
    first = api.post(path, json=SEND_EXAMPLE).json()
    again = api.post(path, json=SEND_EXAMPLE)
    assert again.status_code == 200
    assert again.json()["duplicate"] is True
    assert again.json()["turn"]["id"] == first["turn"]["id"]
    other = {**SEND_EXAMPLE, "message": "Something else."}
    is_error(api.post(path, json=other), 422)
    turns = api.get(f"/v1/sessions/{session['id']}/turns").json()["turns"]
    assert [t["id"] for t in turns] == [first["turn"]["id"]]  # the driver ran once


def test_wait_false_returns_202_after_durable_acceptance(api: httpx.Client) -> None:
    session = a_session(api, "background")
    sent = api.post(
        f"/v1/sessions/{session['id']}/messages",
        json={"message": "What is 12 * 7?", "idempotencyKey": "bg-1", "wait": False},
    )
    assert sent.status_code == 202, sent.text
    turn = sent.json()["turn"]
    assert turn["status"] in ("queued", "running")
    assert sent.headers["location"].endswith(turn["id"])


def test_a_structured_agent_message_with_every_part_kind_is_accepted(api: httpx.Client) -> None:
    session = a_session(api, "structured")
    message = {
        "role": "user",
        "parts": [
            {"type": "text", "text": "What is 12 * 7?"},
            {
                "type": "reference",
                "uri": "file:///projects/product/AGENTS.md",
                "name": "AGENTS.md",
                "mediaType": "text/markdown",
            },
            {"type": "data", "name": "ticket", "data": {"id": 42, "tags": ["math"]}},
        ],
    }
    sent = api.post(
        f"/v1/sessions/{session['id']}/messages",
        json={"message": message, "idempotencyKey": "structured-1", "wait": True},
    )
    assert sent.status_code == 200, sent.text
    turn = sent.json()["turn"]
    assert turn["input"] == message  # kept verbatim
    assert turn["status"] == "completed"


def test_sessions_list_filters_by_agent_and_archived(api: httpx.Client) -> None:
    session = a_session(api, "lister")
    mine = api.get("/v1/sessions", params={"agent_id": "lister"}).json()["sessions"]
    assert [s["id"] for s in mine] == [session["id"]]
    archived = api.delete(f"/v1/sessions/{session['id']}")
    assert archived.status_code == 200, archived.text
    assert archived.json()["status"] == "archived"
    assert api.get("/v1/sessions", params={"agent_id": "lister"}).json()["sessions"] == []
    everything = api.get("/v1/sessions", params={"agent_id": "lister", "include_archived": "true"})
    assert [s["archivedAt"] is not None for s in everything.json()["sessions"]] == [True]


def test_a_client_chosen_session_id_makes_start_idempotent(api: httpx.Client) -> None:
    assert api.post("/v1/agents", json={"id": "chooser", "name": "C"}).status_code == 201
    body = {"agentId": "chooser", "sessionId": "order-123", "metadata": {"ticket": 7}}
    first = api.post("/v1/sessions", json=body)
    again = api.post("/v1/sessions", json=body)
    assert first.status_code in (200, 201), first.text
    assert again.status_code in (200, 201), again.text
    assert first.json()["id"] == again.json()["id"] == "order-123"
    assert api.get("/v1/sessions/order-123").json()["metadata"] == {"ticket": 7}


def test_cancel_without_an_active_turn_is_a_conflict_in_the_envelope(api: httpx.Client) -> None:
    session = a_session(api, "idle")
    error = is_error(api.post(f"/v1/sessions/{session['id']}/cancel"), 409)
    assert error["message"]


def test_a_definition_naming_an_unregistered_driver_is_refused_at_session_start(
    api: httpx.Client,
) -> None:
    body = copy.deepcopy(DEFINITION_EXAMPLE) | {"id": "codex-user"}
    body["toolbox"] = {"toolIds": [], "actionIds": []}
    assert api.post("/v1/agents", json=body).status_code == 201
    response = api.post("/v1/sessions", json={"agentId": "codex-user"})
    assert 400 <= response.status_code < 500, response.text
    assert "codex" in response.json()["error"]["message"]


# -- REST.md: events, pagination and SSE ------------------------------------------------------
def test_events_are_dense_and_page_with_after_and_limit(api: httpx.Client) -> None:
    session = a_session(api, "pager")
    api.post(f"/v1/sessions/{session['id']}/messages", json=SEND_EXAMPLE)
    events = api.get(f"/v1/sessions/{session['id']}/events").json()["events"]
    assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))
    page = api.get(f"/v1/sessions/{session['id']}/events", params={"after": 2, "limit": 3})
    assert [e["sequence"] for e in page.json()["events"]] == [3, 4, 5]
    too_many = api.get(f"/v1/sessions/{session['id']}/events", params={"limit": 1001})
    is_error(too_many, 422)


def test_the_ledger_alone_tells_both_sides_of_the_conversation(api: httpx.Client) -> None:
    session = a_session(api, "ledger")
    api.post(f"/v1/sessions/{session['id']}/messages", json=SEND_EXAMPLE)
    events = api.get(f"/v1/sessions/{session['id']}/events").json()["events"]
    messages = [e["data"]["message"] for e in events if e["type"] == "message"]
    roles = [m["role"] for m in messages]
    assert roles == ["user", "assistant"], roles
    is_agent_message(messages[0], "user")
    is_agent_message(messages[1], "assistant")
    turn = api.get(f"/v1/sessions/{session['id']}/turns").json()["turns"][0]
    assert messages[1] == turn["result"]["message"]


def test_sse_sends_the_backlog_then_resumes_from_the_last_id(daemon: Daemon) -> None:
    with daemon.client() as api:
        session = a_session(api, "streamer")
        api.post(f"/v1/sessions/{session['id']}/messages", json=SEND_EXAMPLE)
        ledger = api.get(f"/v1/sessions/{session['id']}/events").json()["events"]
    last = ledger[-1]["sequence"]
    with daemon.client(timeout=httpx.Timeout(30.0)) as client:
        path = f"/v1/sessions/{session['id']}/events/stream"
        seen: list[int] = []
        with connect_sse(client, "GET", path, params={"after": 0}) as source:
            for event in source.iter_sse():
                seen.append(int(event.id))
                if int(event.id) == 3:
                    break
        # Reconnect with the last seen id as `after`: the gap closes, nothing repeats.
        with connect_sse(client, "GET", path, params={"after": seen[-1]}) as source:
            for event in source.iter_sse():
                seen.append(int(event.id))
                if int(event.id) == last:
                    break
    assert seen == list(range(1, last + 1))
