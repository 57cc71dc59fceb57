"""``agentkeep db check``: SQLite integrity plus the runtime's durable invariants.

First SQLite's ``PRAGMA integrity_check`` on a read-only connection: a damaged file (truncated,
overwritten, not a database) is reported with what SQLite found, and the durable invariants
are not checked on it. Nothing takes the store's lock, so the check also runs while another
process owns the store. Then, for every live agent, from one snapshot:

- history: at most one compaction record, and only first; no tool result without its call;
  one result per call; a call without a result is either in the durable pending batch or
  owed (it is dispatched on resume) — never silently unanswerable (invariants I15, I16);
- pending batch: indexes unique and ordered, each call in the history and unanswered, and
  the agent owes work while a batch is pending (invariants I13, I14);
- queues: sequence numbers strictly increasing per queue, message ids unique and not also
  consumed, messages well-formed, and the agent owes work while anything is queued
  (invariants I3, I4, I7);
- the owed-work fact: a ``tools`` stage has a pending batch to finish (invariant I7).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw
import click
import msgspec

from agentkeep.cli.context import CliState, pass_state
from agentkeep.cli.output import EXIT_FAILURE, CliError
from agentkeep.cli.reading import open_reader
from agentkeep.cli.runtime import Home
from agentkeep.errors import AgentkeepError, StoreDirectoryError
from agentkeep.messages import validate_message
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.readonly import DAMAGE_ERRORS
from agentkeep.persistence.sqlite_database import check_lines
from agentkeep.persistence.store import DATABASE_NAME
from agentkeep.types import AssistantMessage, ToolCallBlock, ToolResultMessage
from agentkeep.types.records import CompactionRecord, UserRecord, rebuild_messages


@dataclass
class Findings:
    """What a check found: problems fail it, notes are for information."""

    problems: list[dict[str, Any]] = field(default_factory=list)
    notes: list[dict[str, Any]] = field(default_factory=list)

    def problem(self, agent_id: str | None, check: str, message: str) -> None:
        self.problems.append({"agent_id": agent_id, "check": check, "message": message})

    def note(self, agent_id: str | None, message: str) -> None:
        self.notes.append({"agent_id": agent_id, "message": message})


def check_agent(tx: Transaction, agent_id: str, found: Findings) -> None:
    """Check one agent's durable invariants, adding what is wrong to ``found``."""
    records = tx.records.load(agent_id)
    owed = tx.facts.read_owed(agent_id)
    pending = tx.calls.pending(agent_id)
    queued = tx.queue.messages(agent_id)
    notices = tx.queue.notices(agent_id)

    compactions = [i for i, r in enumerate(records) if isinstance(r, CompactionRecord)]
    if len(compactions) > 1 or (compactions and compactions[0] != 0):
        found.problem(agent_id, "history", "a compaction record is not the first record")

    calls: dict[str, ToolCallBlock] = {}
    answered: dict[str, int] = {}
    for message in rebuild_messages(records):
        if isinstance(message, AssistantMessage):
            for block in message.content:
                if isinstance(block, ToolCallBlock) and not block.server:
                    if block.call_id in calls:
                        found.problem(agent_id, "history", f"call id {block.call_id} repeats")
                    calls[block.call_id] = block
        elif isinstance(message, ToolResultMessage):
            if message.call_id not in calls:
                found.problem(
                    agent_id, "tool_calls", f"result for {message.call_id} has no earlier call"
                )
            answered[message.call_id] = answered.get(message.call_id, 0) + 1
    for call_id, count in answered.items():
        if count > 1:
            found.problem(agent_id, "tool_calls", f"call {call_id} has {count} results")

    pending_ids = {p.call.call_id for p in pending}
    indexes = [p.index for p in pending]
    if len(set(indexes)) != len(indexes) or indexes != sorted(indexes):
        found.problem(agent_id, "pending_batch", f"batch indexes are not ordered: {indexes}")
    for each in pending:
        if each.call.call_id not in calls:
            found.problem(
                agent_id, "pending_batch", f"pending call {each.call.call_id} is not in history"
            )
        if each.call.call_id in answered:
            found.problem(
                agent_id,
                "pending_batch",
                f"pending call {each.call.call_id} is already answered in history",
            )
    for call_id, call in calls.items():
        if call_id in answered or call_id in pending_ids:
            continue
        if owed is None:
            found.problem(
                agent_id,
                "tool_calls",
                f"tool call {call_id} ({call.name}) is unanswered and the agent owes no work",
            )
        else:
            found.note(agent_id, f"tool call {call_id} ({call.name}) is dispatched on resume")
    if pending and owed is None:
        found.problem(agent_id, "owed", "a tool batch is pending but the agent owes no work")
    if pending:
        found.note(agent_id, f"{len(pending)} tool call(s) of a batch finish on resume")
    if owed is not None and owed.stage == "tools" and not pending:
        found.problem(agent_id, "owed", "owed stage is 'tools' but no tool batch is pending")

    consumed = {r.message_id for r in records if isinstance(r, UserRecord)}
    seen_ids: set[str] = set()
    last_seq: dict[str, int] = {}
    for entry in queued:
        if entry.seq <= last_seq.get(entry.queue, 0):
            found.problem(agent_id, "queues", f"{entry.queue} queue seq {entry.seq} out of order")
        last_seq[entry.queue] = entry.seq
        if entry.id in seen_ids:
            found.problem(agent_id, "queues", f"message {entry.id} is queued twice")
        if entry.id in consumed:
            found.problem(agent_id, "queues", f"message {entry.id} is queued and consumed")
        seen_ids.add(entry.id)
        try:
            validate_message(entry.message)
        except AgentkeepError as error:
            found.problem(agent_id, "queues", f"queued message {entry.id} is malformed: {error}")
    if (queued or notices) and owed is None:
        found.problem(
            agent_id,
            "owed",
            f"{len(queued)} queued message(s) but the agent owes no work: nothing will run them",
        )
    if owed is not None:
        found.note(agent_id, f"owes work (stage {owed.stage}): `agentkeep resume` finishes it")


_MAX_LINES = 20

DAMAGE_ADVICE = (
    "The file is damaged; nothing was written into it. Restore {path} from a backup, or "
    "salvage what SQLite can still read: sqlite3 {path} .recover | sqlite3 recovered.db"
)


def integrity_check(path: Path) -> list[str]:
    """SQLite's ``PRAGMA integrity_check`` of ``path``, read-only: ``["ok"]`` or what it found.

    A file too damaged for the check to run (truncated, not a database) is a finding too.

    Raises:
        StoreDirectoryError: the file cannot be opened at all (permissions).
    """
    try:
        connection = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    except apsw.CantOpenError as error:
        raise StoreDirectoryError(str(path.parent), f"{path.name}: {error}") from None
    try:
        return check_lines(connection.execute(f"PRAGMA integrity_check({_MAX_LINES})"))
    except DAMAGE_ERRORS as error:
        return [f"SQLite cannot read the file: {error}"]
    except (apsw.CantOpenError, apsw.ReadOnlyError) as error:
        raise StoreDirectoryError(
            str(path.parent), f"{path.name} cannot be read by this user ({error})"
        ) from None
    finally:
        connection.close()


def _foreign_key_check(path: Path) -> list[str]:
    connection = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [
            f"dangling reference: {row}" for row in connection.execute("PRAGMA foreign_key_check")
        ]
    finally:
        connection.close()


def run_check(home: Home) -> dict[str, Any]:
    """Every check on the store in ``home``, as a JSON-ready report."""
    if home.database is not None:
        raise CliError(
            "`db check` checks a SQLite file (integrity_check, foreign_key_check); a store on "
            "PostgreSQL is checked by the server (use its own tools, e.g. amcheck).",
            code="not_sqlite",
            hint="Run it without --database / AGENTKEEP_DATABASE on a state directory's store.",
        )
    home.require_store()
    path = home.path / DATABASE_NAME
    found = Findings()
    integrity = integrity_check(path)
    if integrity != ["ok"]:
        for line in integrity[:_MAX_LINES]:
            found.problem(None, "integrity_check", line)
        return {
            "ok": False,
            "path": str(path),
            "integrity": "failed",
            "agents": None,
            "problems": found.problems,
            "notes": found.notes,
            "advice": DAMAGE_ADVICE.format(path=path),
        }
    for line in _foreign_key_check(path)[:_MAX_LINES]:
        found.problem(None, "foreign_key_check", line)

    def each_agent(tx: Transaction) -> int:
        agents = tx.agents.live()
        for row in agents:
            try:
                check_agent(tx, row.id, found)
            except msgspec.DecodeError as error:
                found.problem(row.id, "decode", f"a stored value does not decode: {error}")
        return len(agents)

    with open_reader(home) as store:
        agent_count = store.read(each_agent)
    return {
        "ok": not found.problems,
        "path": str(path),
        "integrity": "ok",
        "agents": agent_count,
        "problems": found.problems,
        "notes": found.notes,
        "advice": None,
    }


def _render(report: dict[str, Any]) -> str:
    lines = [f"store      {report['path']}", f"integrity  {report['integrity']}"]
    if report["agents"] is None:
        lines.append("agents     not checked (the file itself is damaged)")
    else:
        lines.append(f"agents     {report['agents']} checked")
    for problem in report["problems"]:
        who = f"{problem['agent_id']}: " if problem["agent_id"] else ""
        lines.append(f"  ✗ [{problem['check']}] {who}{problem['message']}")
    for note in report["notes"]:
        lines.append(f"  · {note['agent_id']}: {note['message']}")
    if report["ok"]:
        lines.append("db check: OK (every durable invariant holds)")
    else:
        lines.append(f"db check: FAILED ({len(report['problems'])} problem(s))")
    if report["advice"]:
        lines.append(report["advice"])
    return "\n".join(lines)


@click.group()
def db() -> None:
    """Inspect the state directory's database."""


@db.command()
@pass_state
def check(state: CliState) -> None:
    """PRAGMA integrity_check, then the durable invariants; exits 1 on any problem.

    Reads without the store's lock, so it also works while another process owns the store.
    """
    report = run_check(state.home)
    state.output.result(report, _render)
    if not report["ok"]:
        raise SystemExit(EXIT_FAILURE)
