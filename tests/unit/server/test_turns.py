"""Turns over HTTP: wait true/false (202 + Location), the Idempotency-Key header, one turn for
a key sent concurrently and retried, 422 for a key reused with another input, cancel, and the
stream's until_turn_end."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import msgspec
from httpx_sse import connect_sse

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.types import input_blocks

from .conftest import TIMEOUT, Served, serve

MESSAGES = "/v1/sessions/{}/messages"


def _session(client: httpx.Client, session_id: str) -> None:
    client.post("/v1/agents", json={"id": "helper"})
    response = client.post("/v1/sessions", json={"agentId": "helper", "sessionId": session_id})
    assert response.status_code in (200, 201), response.text


def _poll(read: object, until: object, timeout: float = TIMEOUT) -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = read()  # type: ignore[operator]
        if until(value) or time.monotonic() > deadline:  # type: ignore[operator]
            return value
        time.sleep(0.02)


def test_wait_false_is_202_with_the_location_of_the_turn(
    served: Served, client: httpx.Client
) -> None:
    _session(client, "t1")
    served.model.add(script.text("Done."))
    sent = client.post(MESSAGES.format("t1"), json={"message": "Go.", "wait": False})
    assert sent.status_code == 202
    body = sent.json()
    assert body["duplicate"] is False
    turn = body["turn"]
    assert sent.headers["location"] == f"/v1/sessions/t1/turns/{turn['id']}"
    assert turn["input"] == {"role": "user", "parts": [{"type": "text", "text": "Go."}]}
    assert turn["number"] == 1
    done = _poll(
        lambda: client.get(sent.headers["location"]).json(),
        lambda t: t["status"] == "completed",
    )
    assert done["status"] == "completed"  # type: ignore[index]
    assert done["completedAt"] is not None  # type: ignore[index]
    listed = client.get("/v1/sessions/t1/turns").json()
    assert [t["id"] for t in listed["turns"]] == [turn["id"]]


def test_wait_true_answers_with_the_terminal_turn(served: Served, client: httpx.Client) -> None:
    _session(client, "t2")
    served.model.add(script.text("Forty-two."))
    sent = client.post(
        MESSAGES.format("t2"),
        json={"message": {"role": "user", "parts": [{"type": "text", "text": "Answer?"}]}},
    )
    assert sent.status_code == 200
    turn = sent.json()["turn"]
    assert turn["status"] == "completed"
    assert turn["result"]["message"]["role"] == "assistant"
    assert turn["result"]["message"]["parts"][0]["text"] == "Forty-two."


def test_one_key_sent_concurrently_and_retried_makes_one_turn(
    served: Served, client: httpx.Client
) -> None:
    _session(client, "t3")
    served.model.add(script.text("Once."))
    results: list[httpx.Response] = []
    go = threading.Barrier(4)

    def send() -> None:
        with served.client() as own:
            go.wait(TIMEOUT)
            results.append(
                own.post(
                    MESSAGES.format("t3"),
                    json={"message": "Do it once.", "wait": False},
                    headers={"Idempotency-Key": "job-1"},
                )
            )

    threads = [threading.Thread(target=send) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
    assert sorted(r.status_code for r in results) == [200, 200, 200, 202]
    assert len({r.json()["turn"]["id"] for r in results}) == 1
    assert sorted(r.json()["duplicate"] for r in results) == [False, True, True, True]
    # A retry after a dropped response (the body key this time): the same turn.
    retry = client.post(
        MESSAGES.format("t3"), json={"message": "Do it once.", "idempotencyKey": "job-1"}
    )
    assert retry.status_code == 200
    assert retry.json()["duplicate"] is True
    assert retry.json()["turn"]["id"] == results[0].json()["turn"]["id"]
    assert retry.json()["turn"]["status"] == "completed"
    assert len(client.get("/v1/sessions/t3/turns").json()["turns"]) == 1
    assert len(served.model.requests) == 1  # the driver ran once

    other = client.post(
        MESSAGES.format("t3"), json={"message": "Something else.", "idempotencyKey": "job-1"}
    )
    assert other.status_code == 422
    assert other.json()["error"]["code"] == "idempotency_conflict"
    both = client.post(
        MESSAGES.format("t3"),
        json={"message": "x", "idempotencyKey": "a"},
        headers={"Idempotency-Key": "b"},
    )
    assert both.status_code == 422
    assert both.json()["error"]["details"]["field"] == "idempotencyKey"


def test_reference_and_data_parts_are_accepted_and_kept_verbatim(
    served: Served, client: httpx.Client
) -> None:
    _session(client, "t7")
    served.model.add(script.text("Read it."))
    message = {
        "role": "user",
        "parts": [
            {"type": "text", "text": "Review this:"},
            {"type": "reference", "uri": "file:///repo/a.py", "name": "a.py", "mediaType": None},
            {"type": "data", "name": "ticket", "data": {"id": 7, "tags": ["x"]}},
        ],
    }
    sent = client.post(MESSAGES.format("t7"), json={"message": message, "wait": True})
    assert sent.status_code == 200, sent.text
    turn = sent.json()["turn"]
    assert turn["status"] == "completed"
    assert turn["input"] == message  # the parts, verbatim
    assert turn["result"] == {
        "message": {"role": "assistant", "parts": [{"type": "text", "text": "Read it."}]}
    }
    # The native loop kept them as blocks; a model is shown them as text (docs/turns.md).
    (request,) = served.model.requests
    asked = request.context.messages[-1]
    assert isinstance(asked, ak.UserMessage)
    assert input_blocks(asked.content)[1:] == (
        ak.TextBlock(text="[reference: a.py <file:///repo/a.py>]"),
        ak.TextBlock(text='[data ticket: {"id":7,"tags":["x"]}]'),
    )
    # The ledger shows the input the same way (camelCase keys, parts verbatim).
    events = client.get("/v1/sessions/t7/events").json()["events"]
    accepted = next(e for e in events if e["type"] == "message.accepted")
    assert accepted["data"]["message"] == message
    assert "messageId" in accepted["data"]
    assert "message_id" not in accepted["data"]


def test_messages_the_native_driver_cannot_take_are_refused(
    served: Served, client: httpx.Client
) -> None:
    _session(client, "t4")
    bad_part = {"type": "reference", "name": "no uri"}
    parts = client.post(
        MESSAGES.format("t4"),
        json={"message": {"role": "user", "parts": [{"type": "text", "text": "a"}, bad_part]}},
    )
    assert parts.status_code == 422
    assert "uri" in parts.json()["error"]["message"]
    role = client.post(MESSAGES.format("t4"), json={"message": {"role": "assistant", "parts": []}})
    assert role.json()["error"]["details"]["field"] == "message.role"
    assert client.post(MESSAGES.format("nosuch"), json={"message": "x"}).status_code == 404
    assert client.post(MESSAGES.format("t4"), json={"message": ""}).status_code == 422
    assert client.get("/v1/sessions/t4/turns/nosuch").status_code == 404
    assert client.get("/v1/sessions/t4/turns").json()["turns"] == []
    client.delete("/v1/sessions/t4").raise_for_status()
    archived = client.post(MESSAGES.format("t4"), json={"message": "late"})
    assert (archived.status_code, archived.json()["error"]["code"]) == (409, "session_archived")


def test_cancel_the_running_turn(served: Served, client: httpx.Client) -> None:
    _session(client, "t5")
    served.model.add(script.hang())
    sent = client.post(MESSAGES.format("t5"), json={"message": "Hang.", "wait": False})
    location = sent.headers["location"]
    running = _poll(lambda: client.get(location).json(), lambda t: t["status"] == "running")
    assert running["status"] == "running"  # type: ignore[index]
    cancelled = client.post("/v1/sessions/t5/cancel")
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["error"]["code"] == "cancelled"
    again = client.post("/v1/sessions/t5/cancel", json={})
    assert (again.status_code, again.json()["error"]["code"]) == (409, "turn_state")
    by_id = client.post("/v1/sessions/t5/cancel", json={"turnId": cancelled.json()["id"]})
    assert by_id.json()["status"] == "cancelled"  # terminal: unchanged


def test_the_stream_closes_at_the_end_of_the_turn(served: Served, client: httpx.Client) -> None:
    _session(client, "t6")
    served.model.add(script.text("Streamed."))
    turn = client.post(MESSAGES.format("t6"), json={"message": "Go."}).json()["turn"]
    stream = "/v1/sessions/t6/events/stream"
    params = {"turn_id": turn["id"], "until_turn_end": "true"}
    with connect_sse(client, "GET", stream, params=params) as source:
        events = [json.loads(f.data) for f in source.iter_sse() if f.data]
    assert events  # the stream ended by itself
    assert {e["turnId"] for e in events} == {turn["id"]}
    assert events[-1]["type"] == "turn.completed"
    seen = str(events[-1]["sequence"])
    with connect_sse(client, "GET", stream, params=params, headers={"Last-Event-ID": seen}) as s:
        assert [f for f in s.iter_sse() if f.data] == []  # already seen: it ends at once
    missing = client.get(stream, params={"until_turn_end": "true"})
    assert missing.status_code == 422
    assert client.get(stream, params={"turn_id": "nope", "until_turn_end": "1"}).status_code == 404


def test_a_waiting_request_ends_promptly_at_shutdown(tmp_path: Path) -> None:
    served = serve(tmp_path / "state", graceful_seconds=30)
    try:
        with served.client() as client:
            _session(client, "t7")
            served.model.add(script.hang())
            answers: list[httpx.Response] = []

            def send() -> None:
                with served.client() as own:
                    answers.append(own.post(MESSAGES.format("t7"), json={"message": "Hang."}))

            waiter = threading.Thread(target=send)
            waiter.start()
            _poll(
                lambda: client.get("/v1/sessions/t7/turns").json()["turns"],
                lambda turns: bool(turns) and turns[0]["status"] == "running",
            )
        started = time.monotonic()
        assert served.server.stop()
        waiter.join(TIMEOUT)
        assert time.monotonic() - started < 5.0
        assert [a.status_code for a in answers] == [202]  # the turn as it stands, with Location
        assert answers[0].json()["turn"]["status"] == "running"
    finally:
        served.system.abort("t7", wait=True, timeout_seconds=TIMEOUT)  # the hung inference
        served.stop()


def test_a_message_id_and_a_provider_or_model_are_checked_as_the_library_checks_them(
    served: Served, client: httpx.Client
) -> None:
    """``messageId``, ``provider`` and ``model`` (what ``agentkeep send --id/--provider/
    --model`` sends through a daemon): the message id makes resending a no-op; a malformed
    id, an unregistered provider or a model it does not serve is a 422 and writes nothing."""
    _session(client, "t7")
    served.model.add(script.text("One."))
    body = {"message": "Hi.", "messageId": "msgone", "provider": "local", "model": "gym-1"}
    sent = client.post(MESSAGES.format("t7"), json=body)
    assert sent.status_code == 200, sent.text
    first = sent.json()
    assert (first["duplicate"], first["turn"]["status"]) == (False, "completed")
    again = client.post(MESSAGES.format("t7"), json={"message": "Hi.", "messageId": "msgone"})
    assert again.status_code == 200, again.text
    assert (again.json()["duplicate"], again.json()["turn"]["id"]) == (True, first["turn"]["id"])
    refusals = [
        ({"messageId": "Not Valid"}, "invalid_id"),
        ({"provider": "nope"}, "invalid_config"),
        ({"model": "gym-2"}, "model_not_served"),
    ]
    for extra, code in refusals:
        refused = client.post(MESSAGES.format("t7"), json={"message": "x", **extra})
        assert (refused.status_code, refused.json()["error"]["code"]) == (422, code), extra
    accepted = [e for e in served.system.events("t7", limit=1000) if e.type == "message.accepted"]
    assert [e.data["message_id"] for e in accepted] == ["msgone"]
    assert accepted[0].data["options"] == {"provider": "local", "model": "gym-1"}
    assert [t["number"] for t in client.get("/v1/sessions/t7/turns").json()["turns"]] == [1]


def test_a_profile_is_carried_over_rest_and_never_reaches_the_provider(
    served: Served, client: httpx.Client
) -> None:
    """``profile`` selects the message's opaque profile, as ``AgentSystem.send(profile=)``:
    durable in the settings and the events, never shown to the provider."""
    _session(client, "t9")
    served.model.add(script.text("One."))
    body = {"message": "Hi.", "profile": "reviewer-9"}
    sent = client.post(MESSAGES.format("t9"), json=body)
    assert sent.status_code == 200, sent.text
    assert served.system.settings("t9").profile == "reviewer-9"
    accepted = [e for e in served.system.events("t9", limit=1000) if e.type == "message.accepted"]
    assert accepted[0].data["options"] == {"profile": "reviewer-9"}
    shown = [*served.model.model_sessions, *served.model.requests]
    assert not any("reviewer-9" in msgspec.json.encode(each).decode() for each in shown)


def test_a_failed_turn_shows_owed_work_and_settle_ends_it(
    served: Served, client: httpx.Client
) -> None:
    """The owed work is on the session, each refusal names the
    settle route, and the settle answers the question so the session can be archived."""
    _session(client, "t9")
    served.model.add(script.error("internal_error", "the vendor is down"))
    sent = client.post(MESSAGES.format("t9"), json={"message": "Go."})
    assert sent.json()["turn"]["status"] == "failed"
    assert served.system.wait_for_idle("t9", timeout_seconds=TIMEOUT)
    session = client.get("/v1/sessions/t9").json()
    assert session["owes"]["turnId"] == sent.json()["turn"]["id"]
    assert "the vendor is down" in session["owes"]["reason"]
    archived = client.delete("/v1/sessions/t9")
    assert (archived.status_code, archived.json()["error"]["code"]) == (409, "session_busy")
    assert "POST /v1/sessions/t9/settle" in archived.json()["error"]["message"]
    cancelled = client.post("/v1/sessions/t9/cancel")
    assert (cancelled.status_code, cancelled.json()["error"]["code"]) == (409, "turn_state")
    assert "POST /v1/sessions/t9/settle" in cancelled.json()["error"]["message"]

    settled = client.post("/v1/sessions/t9/settle", json={"note": "not needed"})
    assert settled.status_code == 200, settled.text
    assert settled.json()["owes"] is None
    last = client.get("/v1/sessions/t9/messages").json()["messages"][-1]
    assert "not needed" in json.dumps(last)
    assert client.post("/v1/sessions/t9/settle").json() == settled.json()  # nothing owed
    assert client.delete("/v1/sessions/t9").json()["status"] == "archived"


def test_cancel_takes_back_a_joined_steer_and_the_queued_turn_runs(
    served: Served, client: httpx.Client
) -> None:
    """A cancel takes back the steers its turn joined, over REST (docs/decisions.md)."""
    _session(client, "t10")
    served.model.add(script.hang(), script.text("Next done."))
    first = client.post(MESSAGES.format("t10"), json={"message": "Hang.", "wait": False})
    assert served.model.wait_for_requests(1, timeout_seconds=TIMEOUT)
    steer = client.post(
        MESSAGES.format("t10"),
        json={"message": "Steered.", "delivery": "steer", "wait": False},
    )
    assert steer.json()["turn"]["id"] == first.json()["turn"]["id"]  # it joined
    after = client.post(MESSAGES.format("t10"), json={"message": "Next.", "wait": False})
    cancelled = client.post("/v1/sessions/t10/cancel")
    assert cancelled.json()["id"] == first.json()["turn"]["id"]
    assert cancelled.json()["status"] == "cancelled"
    done = _poll(
        lambda: client.get(after.headers["location"]).json(),
        lambda t: t["status"] not in ("queued", "running"),
    )
    assert done["status"] == "completed"  # type: ignore[index]
    messages = json.dumps(client.get("/v1/sessions/t10/messages").json())
    assert "Steered." not in messages
    assert "Next done." in messages
    assert len(served.model.requests) == 2
