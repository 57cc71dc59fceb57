"""A driver written to seed 002's DRIVERS.md runs unchanged.

``MyRuntime`` is DRIVERS.md's example driver ported line for line to Python (its
``context.signal.throwIfAborted()``, ``context.emit({type, data})`` and its returned
``{driverSessionId, message: {role, parts}, metadata}``), registered with
``AgentSystem.open(drivers=[...])`` and driven over REST with httpx against a real daemon, with
REST.md's own request bodies. Its second turn must see the first as seed 002 ``AgentMessage``
history.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from agentkeep.drivers import DriverRunRequest

from .conftest import TIMEOUT, serve


class MyRuntime:
    """DRIVERS.md's ``defineDriver({id: 'my-runtime', async run(request, context) {...}})``."""

    id = "my-runtime"

    def run(self, request: Any, context: Any) -> Any:
        context.signal.throw_if_aborted()
        context.emit({"type": "text.delta", "data": {"text": "Working…"}})

        return {
            "driverSessionId": request.driver_session_id or "native-session-id",
            "message": {
                "role": "assistant",
                "parts": [{"type": "text", "text": "Done."}],
            },
            "metadata": {"provider": "example"},
        }


class Recording(MyRuntime):
    """The port, unchanged, plus a record of the requests it was given."""

    def __init__(self) -> None:
        self.requests: list[DriverRunRequest] = []

    def run(self, request: Any, context: Any) -> Any:
        self.requests.append(request)
        return super().run(request, context)


DONE = {"role": "assistant", "parts": [{"type": "text", "text": "Done."}]}


def test_the_drivers_md_example_runs_unchanged_over_rest(tmp_path: Path) -> None:
    driver = Recording()
    served = serve(tmp_path / "state", drivers=[driver])
    try:
        with served.client() as client:
            _converse(client, driver)
    finally:
        served.stop()


def _converse(client: httpx.Client, driver: Recording) -> None:
    created = client.post("/v1/agents", json={"id": "reviewer", "driver": {"id": "my-runtime"}})
    assert created.status_code == 201, created.text
    started = client.post("/v1/sessions", json={"agentId": "reviewer"})
    assert started.status_code == 201, started.text
    session_id = started.json()["id"]
    messages = f"/v1/sessions/{session_id}/messages"

    # REST.md's "Send a message" body, verbatim.
    first = client.post(
        messages,
        json={"message": "Review the current diff.", "idempotencyKey": "review-001", "wait": True},
        timeout=TIMEOUT,
    )
    assert first.status_code == 200, first.text
    turn = first.json()["turn"]
    assert (turn["status"], turn["error"]) == ("completed", None)
    assert turn["result"] == {
        "message": DONE,
        "metadata": {"provider": "example"},
        "driverSessionId": "native-session-id",
    }
    session = client.get(f"/v1/sessions/{session_id}").json()
    assert session["driverSessionId"] == "native-session-id"

    # A structured AgentMessage with a reference part, as seed 002's SendInput allows.
    asked = {
        "role": "user",
        "parts": [
            {"type": "text", "text": "And this file."},
            {"type": "reference", "uri": "file:///repo/b.py", "name": "b.py", "mediaType": None},
        ],
    }
    second = client.post(
        messages, json={"message": asked, "idempotencyKey": "review-002"}, timeout=TIMEOUT
    )
    assert second.status_code == 200, second.text
    assert second.json()["turn"]["status"] == "completed"
    assert second.json()["turn"]["input"] == asked

    # What the driver was given: seed 002's request, history as AgentMessages.
    one, two = driver.requests
    said = {"role": "user", "parts": [{"type": "text", "text": "Review the current diff."}]}
    assert one.history == ()
    assert one.input == said
    assert one.driver_session_id is None
    assert two.history == (said, DONE)
    assert two.input == asked
    assert two.driver_session_id == "native-session-id"
    assert two.agent.definition.driver.id == "my-runtime"
    assert two.turn.idempotency_key == "review-002"

    # The ledger tells both sides: the input, then the driver's message (data camelCase).
    events = client.get(f"/v1/sessions/{session_id}/events").json()["events"]
    assert [e["type"] for e in events] == [
        "turn.queued",
        "message.accepted",
        "turn.running",
        "message",
        "turn.completed",
    ] * 2
    assert events[0]["data"]["idempotencyKey"] == "review-001"
    assert events[1]["data"]["message"] == said
    assert events[3]["data"] == {"role": "assistant", "message": DONE}
    assert events[6]["data"]["message"] == asked
    assert all("turn_id" not in e["data"] for e in events)
    assert all(e["createdAt"].endswith("Z") for e in events)
