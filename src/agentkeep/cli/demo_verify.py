"""The demo's verdict, read back from durable state: the transcript, the tool ledger, notes.

Nothing here trusts what the demo printed: every claim is checked against what is on disk.
"""

from __future__ import annotations

from typing import Any

from agentkeep.cli.check import run_check
from agentkeep.cli.output import block_text
from agentkeep.cli.reading import open_reader
from agentkeep.cli.runtime import Home
from agentkeep.cli.tools import LEDGER_FILE, NOTES_FILE, Ledger
from agentkeep.types import (
    AssistantMessage,
    Message,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
)
from agentkeep.types.records import rebuild_messages


def answers_per_message(messages: list[Message]) -> list[tuple[str, int]]:
    """Each user message's text and how many text answers the assistant gave it."""
    counts: list[tuple[str, int]] = []
    for message in messages:
        if isinstance(message, UserMessage):
            counts.append((block_text(message.content), 0))
        elif (
            isinstance(message, AssistantMessage)
            and counts
            and any(isinstance(b, TextBlock) and b.text for b in message.content)
        ):
            text, count = counts[-1]
            counts[-1] = (text, count + 1)
    return counts


def _note_call(messages: list[Message]) -> tuple[ToolCallBlock | None, list[ToolCallBlock]]:
    for message in messages:
        if isinstance(message, AssistantMessage):
            calls = [b for b in message.content if isinstance(b, ToolCallBlock)]
            for call in calls:
                if call.name == "save_note":
                    return call, calls
    return None, []


def verify(home: Home, agent_id: str, *, child_pid: int, note_text: str) -> dict[str, Any]:
    """Check the demo's promises; returns ``ok``, readable ``lines`` and named ``checks``."""
    with open_reader(home) as store:

        def read(tx: Any) -> tuple[list[Message], bool, int, int]:
            messages = rebuild_messages(tx.records.load(agent_id))
            owed = tx.facts.read_owed(agent_id) is not None
            return messages, owed, len(tx.queue.messages(agent_id)), len(tx.calls.pending(agent_id))

        messages, owes, queued, pending = store.read(read)
    runs = Ledger(home.path / LEDGER_FILE).runs()
    notes_path = home.path / NOTES_FILE
    notes = notes_path.read_text(encoding="utf-8").splitlines() if notes_path.exists() else []
    checks: dict[str, bool] = {}
    lines: list[str] = []

    def claim(name: str, passed: bool, text: str) -> None:
        checks[name] = passed
        lines.append(("✓ " if passed else "✗ ") + text)

    answers = answers_per_message(messages)
    claim(
        "every_message_answered_once",
        len(answers) == 3 and all(count == 1 for _, count in answers),
        f"{len(answers)} user messages, answered " + ", ".join(f"{count}×" for _, count in answers),
    )
    note_call, batch = _note_call(messages)
    note_runs = [r for r in runs if note_call and r.provider_call_id == note_call.call_id]
    claim(
        "note_written_once",
        len(note_runs) == 1 and note_runs[0].pid == child_pid and notes.count(note_text) == 1,
        f"save_note ran {len(note_runs)}× (in pid {child_pid}, before the kill); "
        f"notes.txt holds the note {notes.count(note_text)}×",
    )
    results = {m.call_id: m for m in messages if isinstance(m, ToolResultMessage)}
    note_result = results.get(note_call.call_id) if note_call else None
    claim(
        "note_reported_not_retried",
        note_result is not None and note_result.is_error,
        "its call was answered, not re-run: "
        + (block_text(note_result.content) if note_result else "(no result)"),
    )
    for call in batch:
        if call.name == "save_note":
            continue
        pids = [r.pid for r in runs if r.provider_call_id == call.call_id and r.tool == call.name]
        where = ", ".join(
            f"pid {pid} " + ("before the kill" if pid == child_pid else "after the restart")
            for pid in pids
        )
        lines.append(f"· {call.name} (durable) ran {len(pids)}× ({where}): re-running is allowed")
    if home.database is None:  # SQLite's file checks; PostgreSQL checks its own pages
        report = run_check(home)
        claim(
            "db_check",
            bool(report["ok"]),
            "db check: every durable invariant holds"
            if report["ok"]
            else f"db check found problems: {report['problems']}",
        )
    claim(
        "nothing_left_owed",
        not owes and queued == 0 and pending == 0,
        f"nothing left owed (queued: {queued}, pending calls: {pending})",
    )
    return {"ok": all(checks.values()), "lines": lines, "checks": checks}
