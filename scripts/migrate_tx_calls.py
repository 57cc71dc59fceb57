#!/usr/bin/env python3
"""Rewrite calls of the old flat ``Transaction`` methods to the per-table statement objects.

Issue 30 item 5 split ``SqliteTransaction`` (8 statement mixins, 71 protocol members) into
one statement object per table: ``tx.create_agent(row)`` became ``tx.agents.create(row)``,
``tx.append_event(...)`` became ``tx.ledger.append(...)``, and so on. :data:`MOVES` is the
whole mapping, in one place. The script rewrites:

- calls on a transaction: ``<receiver>.<old>`` where the receiver is ``tx``, ``_tx``,
  ``self._tx`` or ``self.tx`` (every name the code gives a transaction), as
  ``<receiver>.<table>.<new>``;
- class references in patches and docs: ``SqliteTransaction.<old>`` and
  ``Transaction.<old>`` as ``<StatementClass>.<new>``, and
  ``(SqliteTransaction, "<old>"`` (``monkeypatch.setattr``, ``patched``) as
  ``(<StatementClass>, "<new>"``; it then prints the import the file needs (add it by hand:
  ``from agentkeep.persistence.<module> import <StatementClass>``).

It is idempotent (a rewritten call no longer matches: ``tx.ledger.append`` is not
``tx.<old>``) and prints every change, file by file. A file containing the line
``migrate_tx_calls: skip`` is left alone. Run it from the repository's root:

    python scripts/migrate_tx_calls.py            # rewrite src/ tests/ bench/ docs/ scripts/
    python scripts/migrate_tx_calls.py --check    # list what would change; exit 1 if any
    python scripts/migrate_tx_calls.py PATH ...   # only these files or directories
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

#: old ``Transaction`` method -> (``tx`` attribute, new method name). The one mapping.
MOVES: dict[str, tuple[str, str]] = {
    # tx.agents (persistence/agents.py)
    "create_agent": ("agents", "create"),
    "get_agent": ("agents", "get"),
    "list_agents": ("agents", "live"),
    "delete_agent": ("agents", "delete"),
    "update_metadata": ("agents", "update_metadata"),
    "children_of": ("agents", "children_of"),
    # tx.records (persistence/records.py)
    "load_records": ("records", "load"),
    "record_count": ("records", "count"),
    "append_record": ("records", "append"),
    "replace_records": ("records", "replace"),
    "rewrite_records": ("records", "rewrite"),
    # tx.archive (persistence/archive.py)
    "archive_records": ("archive", "add_epoch"),
    "archived_epochs": ("archive", "epochs"),
    "last_epoch": ("archive", "last_epoch"),
    "purge_archived": ("archive", "purge"),
    # tx.ledger (persistence/ledger/statements.py)
    "max_event_bytes": ("ledger", "max_event_bytes"),
    "check_input_size": ("ledger", "check_input_size"),
    "check_event_size": ("ledger", "check_event_size"),
    "append_event": ("ledger", "append"),
    "last_event_sequence": ("ledger", "last_sequence"),
    "noted_event_sequence": ("ledger", "noted_sequence"),
    "events": ("ledger", "events"),
    "session_known": ("ledger", "agent_known"),
    # tx.turns (persistence/turns.py, turn_reads.py)
    "read_turn": ("turns", "read"),
    "list_turns": ("turns", "page"),
    "last_turn": ("turns", "last"),
    "live_turns": ("turns", "live"),
    "started_turns": ("turns", "started"),
    "all_live_turns": ("turns", "all_live"),
    "running_turn_id": ("turns", "running_id"),
    "turn_of_message": ("turns", "of_message"),
    "turn_message_ids": ("turns", "message_ids"),
    "turn_inputs_queued": ("turns", "inputs_queued"),
    "turn_of_key": ("turns", "of_key"),
    "session_archived": ("turns", "session_archived"),
    "open_turn": ("turns", "open"),
    "move_turn": ("turns", "move"),
    "move_turns": ("turns", "move_all"),
    # tx.queue (persistence/queue_statements.py)
    "claim_message_id": ("queue", "claim_message_id"),
    "release_message_ids": ("queue", "release_message_ids"),
    "enqueue": ("queue", "enqueue"),
    "queued": ("queue", "messages"),
    "dequeue": ("queue", "dequeue"),
    "inject_notice": ("queue", "inject_notice"),
    "notices": ("queue", "notices"),
    "remove_notice": ("queue", "remove_notice"),
    # tx.calls (persistence/call_statements.py)
    "put_pending_calls": ("calls", "put"),
    "pending_calls": ("calls", "pending"),
    "claim_tool_result": ("calls", "claim_result"),
    "tool_result_claim": ("calls", "result_claim"),
    "mark_call_committed": ("calls", "mark_committed"),
    "remove_pending_call": ("calls", "remove"),
    # tx.facts (persistence/fact_statements.py)
    "read_settings": ("facts", "read_settings"),
    "write_settings": ("facts", "write_settings"),
    "read_owed": ("facts", "read_owed"),
    "write_owed": ("facts", "write_owed"),
    "claim_owed": ("facts", "claim_owed"),
    "delete_owed": ("facts", "delete_owed"),
    "agents_owing_work": ("facts", "agents_owing_work"),
    "read_context_tokens": ("facts", "read_context_tokens"),
    "write_context_tokens": ("facts", "write_context_tokens"),
    # tx.kv (persistence/kv_statements.py)
    "kv_read": ("kv", "read"),
    "kv_list": ("kv", "scan"),
    "kv_write": ("kv", "write"),
    "kv_delete": ("kv", "delete"),
    "kv_clear": ("kv", "clear"),
    "kv_write_if_absent": ("kv", "write_if_absent"),
    "kv_compare_and_set": ("kv", "compare_and_set"),
    "kv_delete_if_present": ("kv", "delete_if_present"),
    # tx.sql (persistence/sql.py): the raw statements of registry/ and sessions/ tables
    "query": ("sql", "query"),
    "query_remembered": ("sql", "query_remembered"),
    "execute": ("sql", "execute"),
}

#: ``tx`` attribute -> (statement class, its module under ``agentkeep.persistence``).
CLASSES: dict[str, tuple[str, str]] = {
    "agents": ("AgentStatements", "agents"),
    "records": ("RecordStatements", "records"),
    "archive": ("ArchiveStatements", "archive"),
    "ledger": ("LedgerStatements", "ledger"),
    "turns": ("TurnStatements", "turns"),
    "queue": ("QueueStatements", "queue_statements"),
    "calls": ("CallStatements", "call_statements"),
    "facts": ("FactStatements", "fact_statements"),
    "kv": ("KvStatements", "kv_statements"),
    "sql": ("SqlStatements", "sql"),
}

#: What the code calls a transaction (``lambda tx: …``, ``def work(tx: Transaction)``,
#: ``self._tx`` in persistence/kv.py). Not a bare ``_``-less prefix: ``ctx.queued`` stays.
RECEIVER = r"(?<![\w.])(?P<receiver>(?:self\.)?_?tx)"
_NAMES = "|".join(sorted(map(re.escape, MOVES), key=len, reverse=True))
CALL = re.compile(rf"{RECEIVER}\.(?P<name>{_NAMES})\b(?!\s*=[^=])")
CLASS_REF = re.compile(rf"(?<![\w.])(?:Sqlite)?Transaction\.(?P<name>{_NAMES})\b")
PATCH = re.compile(rf"\(\s*SqliteTransaction\s*,\s*(?P<quote>[\"'])(?P<name>{_NAMES})(?P=quote)")

DEFAULT_ROOTS = ("src", "tests", "bench", "docs", "scripts")
SUFFIXES = (".py", ".md")
#: A file holding this line is left alone (its old names are examples, e.g. the script's test).
SKIP_MARKER = "migrate_tx_calls: skip"


def _call(match: re.Match[str]) -> str:
    table, new = MOVES[match["name"]]
    return f"{match['receiver']}.{table}.{new}"


def _class_ref(match: re.Match[str]) -> str:
    table, new = MOVES[match["name"]]
    return f"{CLASSES[table][0]}.{new}"


def _patch(match: re.Match[str]) -> str:
    table, new = MOVES[match["name"]]
    quote = match["quote"]
    return f"({CLASSES[table][0]}, {quote}{new}{quote}"


def rewrite(text: str) -> tuple[str, list[str]]:
    """``text`` with every old call rewritten, and a line per change (old -> new)."""
    changes: list[str] = []

    def noting(replace: object) -> object:
        def run(match: re.Match[str]) -> str:
            new = replace(match)  # type: ignore[operator]
            line = text.count("\n", 0, match.start()) + 1
            changes.append(f"  {line}: {match[0]} -> {new}")
            return str(new)

        return run

    for pattern, replace in ((PATCH, _patch), (CLASS_REF, _class_ref), (CALL, _call)):
        text = pattern.sub(noting(replace), text)  # type: ignore[arg-type]
    return text, changes


def needed_imports(text: str) -> list[str]:
    """Imports a patched file needs for the statement classes it now names."""
    wanted = []
    for class_name, module in CLASSES.values():
        if re.search(rf"\b{class_name}\b", text) and not re.search(
            rf"import[^\n]*\b{class_name}\b|^\s+{class_name},$", text, re.M
        ):
            wanted.append(f"from agentkeep.persistence.{module} import {class_name}")
    return wanted


def files(paths: list[str]) -> list[Path]:
    found: list[Path] = []
    for name in paths:
        path = Path(name)
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            found.extend(p for p in sorted(path.rglob("*")) if p.suffix in SUFFIXES)
    # Never rewrite this script's own mapping, nor a file that asks to be skipped.
    me = Path(__file__).resolve()
    return [
        p
        for p in found
        if p.resolve() != me and ".venv" not in p.parts and SKIP_MARKER not in p.read_text()
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=list(DEFAULT_ROOTS))
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if due")
    args = parser.parse_args(argv)
    total = 0
    for path in files(args.paths):
        text = path.read_text()
        new, changes = rewrite(text)
        if not changes:
            continue
        total += len(changes)
        print(f"{path}: {len(changes)} change(s)")
        for change in changes:
            print(change)
        for line in needed_imports(new) if path.suffix == ".py" else []:
            print(f"  needs: {line}")
        if not args.check:
            path.write_text(new)
    verb = "would change" if args.check else "changed"
    print(f"{verb} {total} reference(s)")
    return 1 if args.check and total else 0


if __name__ == "__main__":
    sys.exit(main())
