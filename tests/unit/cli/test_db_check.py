"""``agentkeep db check``: integrity plus the durable invariants, non-zero on any problem."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentkeep.messages import user
from agentkeep.persistence import Store, Transaction
from agentkeep.types import TextBlock, ToolCallBlock, ToolResultMessage
from agentkeep.types.records import BlockRecord, QueuedMessage, ToolRecord

pytestmark = pytest.mark.sqlite_only(
    "`db check` is SQLite's integrity and foreign-key check of the file; refused on PostgreSQL"
)

REPORT_FIELDS = {"ok", "path", "integrity", "agents", "problems", "notes", "advice"}


def break_store(home: Path, work: Callable[[Transaction], object]) -> None:
    with Store.open(home) as store:
        store.transact(work)


def test_a_healthy_store_passes(invoke: Any) -> None:
    invoke("session", "start", "--id", "alpha")
    invoke("session", "send", "alpha", "hi", "--wait")
    result = invoke("db", "check", json_mode=True)
    assert result.exit_code == 0
    report = json.loads(result.stdout)
    assert set(report) == REPORT_FIELDS
    assert report["ok"] is True
    assert report["integrity"] == "ok"
    assert report["agents"] == 1
    assert report["problems"] == []
    assert "db check: OK" in invoke("db", "check").stdout


def test_queued_work_is_consistent_and_noted(invoke: Any) -> None:
    invoke("session", "start", "--id", "alpha")
    invoke("session", "send", "alpha", "hi")
    report = json.loads(invoke("db", "check", json_mode=True).stdout)
    assert report["ok"] is True
    assert any("owes work" in note["message"] for note in report["notes"])


CALL = ToolCallBlock(call_id="call-9", name="calculator", arguments='{"expression": "1+1"}')


@pytest.mark.parametrize(
    ("damage", "check", "words"),
    [
        (
            lambda tx: tx.queue.enqueue(
                "alpha", QueuedMessage(id="m1", queue="send", message=user("x"))
            ),
            "owed",
            "owes no work",
        ),
        (
            lambda tx: tx.records.append("alpha", BlockRecord(block=CALL)),
            "tool_calls",
            "unanswered",
        ),
        (
            lambda tx: tx.records.append(
                "alpha",
                ToolRecord(
                    message=ToolResultMessage(call_id="call-7", content=(TextBlock(text="2"),))
                ),
            ),
            "tool_calls",
            "no earlier call",
        ),
    ],
    ids=["queued_without_owed_work", "unanswered_call", "result_without_call"],
)
def test_a_broken_invariant_fails_the_check(
    invoke: Any, home: Path, damage: Callable[[Transaction], object], check: str, words: str
) -> None:
    invoke("session", "start", "--id", "alpha")
    break_store(home, damage)
    result = invoke("db", "check", json_mode=True)
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False
    (problem,) = report["problems"]
    assert problem["agent_id"] == "alpha"
    assert problem["check"] == check
    assert words in problem["message"]
    readable = invoke("db", "check")
    assert readable.exit_code == 1
    assert "db check: FAILED (1 problem(s))" in readable.stdout


def test_a_file_that_is_not_a_database_is_reported(invoke: Any, home: Path) -> None:
    invoke("session", "start", "--id", "alpha")
    (home / "agents.db").write_bytes(b"this is not a database" * 100)
    for name in ("agents.db-wal", "agents.db-shm"):
        (home / name).unlink(missing_ok=True)
    result = invoke("db", "check", json_mode=True)
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["integrity"] == "failed"
    (problem,) = report["problems"]
    assert problem["check"] == "integrity_check"
    assert "not a database" in problem["message"]
