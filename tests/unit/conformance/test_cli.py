"""Seed 002's CLI.md, its commands as written there, run as subprocesses with ``--state-dir``
— once on the state directory itself and once through ``agentkeep serve`` owning it — with the
same JSON and exit codes either way."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import pytest
from tests.unit.conformance.seed002 import (
    DEFINITION_EXAMPLE,
    agentkeep,
    is_agent_message,
    serving,
    text_of,
)

MODES = ["direct", "daemon"]


@pytest.fixture(params=MODES)
def home(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    state = tmp_path / "state"
    running: AbstractContextManager[object] = (
        serving(state) if request.param == "daemon" else nullcontext()
    )
    with running:
        yield state


def run_json(home: Path, *args: str, stdin: str | None = None) -> Any:
    """``agentkeep --state-dir HOME --json ARGS``: its JSON (it must succeed)."""
    done = agentkeep("--state-dir", str(home), "--json", *args, stdin=stdin)
    assert done.returncode == 0, (args, done.returncode, done.stdout, done.stderr)
    return json.loads(done.stdout)


def test_agent_commands(home: Path, tmp_path: Path) -> None:
    definition = tmp_path / "definition.json"
    definition.write_text(json.dumps(DEFINITION_EXAMPLE))
    patch = tmp_path / "patch.json"
    patch.write_text(json.dumps({"resources": {"skills": ["security"]}}))

    created = run_json(home, "agent", "create", str(definition))
    assert created["definition"] == DEFINITION_EXAMPLE
    assert [a["id"] for a in run_json(home, "agent", "list")["agents"]] == ["reviewer"]
    assert run_json(home, "agent", "show", "reviewer")["currentRevision"] == 1
    updated = run_json(home, "agent", "update", "reviewer", str(patch))
    assert updated["currentRevision"] == 2
    assert updated["definition"]["resources"]["files"] == ["AGENTS.md"]
    run_json(home, "agent", "delete", "reviewer")
    assert run_json(home, "agent", "list")["agents"] == []
    listed = run_json(home, "agent", "list", "--include-deleted")["agents"]
    assert [a["deletedAt"] is not None for a in listed] == [True]
    assert run_json(home, "agent", "show", "reviewer", "--include-deleted")["id"] == "reviewer"
    # `create` requires an unused id: a deleted one stays reserved.
    again = agentkeep("--state-dir", str(home), "--json", "agent", "create", str(definition))
    assert again.returncode != 0
    assert again.stdout == ""
    assert "reviewer" in again.stderr


def test_session_commands(home: Path, tmp_path: Path) -> None:
    definition = tmp_path / "calc.json"
    definition.write_text(json.dumps({"id": "calc", "name": "Calc", "instructions": "Compute."}))
    run_json(home, "agent", "create", str(definition))
    session = run_json(home, "session", "start", "calc", "--id", "order-123")
    assert session["id"] == "order-123"
    assert session["agentId"] == "calc"
    sent = run_json(home, "session", "send", "order-123", "What is 12 * 7?", "--key", "k-1")
    assert sent["duplicate"] is False
    assert sent["turn"]["idempotencyKey"] == "k-1"
    is_agent_message(sent["turn"]["input"], "user")
    again = run_json(home, "session", "send", "order-123", "What is 12 * 7?", "--key", "k-1")
    assert again["duplicate"] is True
    assert again["turn"]["id"] == sent["turn"]["id"]

    shown = run_json(home, "session", "show", "order-123")
    assert {"session", "turns", "events"} <= set(shown)
    events = run_json(home, "session", "events", "order-123", "--after", "1")["events"]
    assert events[0]["sequence"] == 2
    assert [s["id"] for s in run_json(home, "session", "list", "--agent", "calc")["sessions"]] == [
        "order-123"
    ]


def test_talk_starts_a_session_and_continues_it(home: Path, tmp_path: Path) -> None:
    definition = tmp_path / "calc.json"
    definition.write_text(json.dumps({"id": "calc", "name": "Calc", "instructions": "Compute."}))
    run_json(home, "agent", "create", str(definition))
    first = run_json(home, "talk", "calc", "What is 12 * 7?", "--key", "talk-1")
    turn = first["turn"]
    assert turn["status"] == "completed"
    is_agent_message(turn["result"]["message"], "assistant")
    assert "84" in text_of(turn["result"]["message"])
    session_id = turn["sessionId"]
    # The same key without --session: the same session and turn, the model not run again.
    repeated = run_json(home, "talk", "calc", "What is 12 * 7?", "--key", "talk-1")
    assert repeated["duplicate"] is True
    assert repeated["turn"]["id"] == turn["id"]
    refused = agentkeep(
        "--state-dir", str(home), "--json", "talk", "calc", "Another question", "--key", "talk-1"
    )
    assert refused.returncode == 2, refused.stderr
    continued = run_json(home, "talk", "calc", "And 6 * 7?", "--session", session_id)
    assert continued["turn"]["sessionId"] == session_id
    background = run_json(home, "talk", "calc", "What is 2 + 2?", "--background")
    assert background["turn"]["status"] in ("queued", "running")


def test_cancel_and_archive(home: Path, tmp_path: Path) -> None:
    definition = tmp_path / "calc.json"
    definition.write_text(json.dumps({"id": "calc", "name": "Calc"}))
    run_json(home, "agent", "create", str(definition))
    run_json(home, "session", "start", "calc", "--id", "to-archive")
    idle_cancel = agentkeep("--state-dir", str(home), "--json", "session", "cancel", "to-archive")
    assert idle_cancel.returncode != 0
    assert idle_cancel.stderr.strip()
    archived = run_json(home, "session", "archive", "to-archive")
    assert archived["status"] == "archived"
    assert run_json(home, "session", "list")["sessions"] == []
    assert len(run_json(home, "session", "list", "--include-archived")["sessions"]) == 1
