"""The checks of the ``extensions`` suite (:mod:`.extensions`), from durable state only.

After every process the disk is read through a fresh open, in one snapshot: the agent's
state, the module tables, the history KV, the agent's KV and the embedder's ``shared_kv``.

- ``E1`` — every migration applied exactly once per key: a recorded key has exactly one
  row of each of its two parts, an unrecorded key none (a crash inside a migration leaves
  nothing of it); after the healthy last process every key of its release is recorded.
- ``E2`` — every notice in the history exactly once, at its boundary: each message's notice
  immediately before that message's record (and every consumed message has one), each
  inference's notice once, every response starting right after an inference notice, no two
  inference notices with nothing between them (a request asked again), each injected notice
  once and followed only by notices of its stage.
- ``E3`` — history KV never outlives its history: the epoch counter (written in
  ``history_erased_transact``) equals the compactions archived; every key of the history KV
  holds the current epoch and names a notice of the current history written in that epoch;
  every notice of the current history written in the current epoch has its key.
- ``E4`` — an embedder transaction's sends all or none: its messages (queued, in the
  conversation or archived) all present or all absent, its ``shared_kv`` write present
  exactly when they are; a committed one all, a rolled-back one none.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentkeep.chaos.checker import Checker
from agentkeep.chaos.invariants import INVARIANTS, Violation
from agentkeep.chaos.process import DurableState, ProcessReport, read_durable
from agentkeep.persistence.interface import Transaction as StoreTransaction
from agentkeep.persistence.kv_keys import scope_prefix
from agentkeep.persistence.opening import open_store
from agentkeep.runtime.kv_areas import HISTORY_AREA, KV_AREA
from agentkeep.types import TextBlock
from agentkeep.types.records import (
    BlockRecord,
    CompactionRecord,
    ConversationRecord,
    SystemRecord,
    UserRecord,
)

if TYPE_CHECKING:
    from agentkeep.chaos.world import ChaosWorld

INVARIANTS.update(
    {
        "E1": "a module migration is applied exactly once per key, whole or not at all",
        "E2": "every notice is in the history exactly once, at its boundary",
        "E3": "history KV never outlives the history it belongs to",
        "E4": "an embedder transaction's sends land all together or not at all",
    }
)

MODULE = "extmod"
TX_STORE = "exttx"
TOOL = "fragile_tool"
_MESSAGE = re.compile(r"^ext-notice message (\S+) epoch (\d+)$")
_INFERENCE = re.compile(r"^ext-notice inference (\S+) epoch (\d+)$")
_INJECT = re.compile(r"^ext-inject (\S+)$")


def message_notice(message_id: str, epoch: int) -> str:
    """The text of the message boundary's notice."""
    return f"ext-notice message {message_id} epoch {epoch}"


def inference_notice(inference_id: str, epoch: int) -> str:
    """The text of the inference boundary's notice."""
    return f"ext-notice inference {inference_id} epoch {epoch}"


def inject_notice(turn_id: str) -> str:
    """The text of the notice a turn injects."""
    return f"ext-inject {turn_id}"


@dataclass
class Transaction:
    """One embedder transaction: its number, message ids, whether its work raises on purpose,
    the process that ran it and its outcome (``committed``, ``rolled back``, ``unknown``
    until the disk settles it, ``not run``)."""

    number: int
    ids: tuple[str, ...]
    rollback: bool
    process: int
    outcome: str = "pending"


@dataclass(frozen=True)
class Snapshot:
    """What the checks read, in one store snapshot."""

    state: DurableState
    migrations: dict[tuple[str, str], int]  # (module, key) -> recorded rows
    rows: dict[tuple[str, str, str], int]  # (module, key, part) -> rows
    history_kv: dict[str, Any]  # the hooks' history KV, by key
    tool_kv: dict[str, Any]  # the transactional tool's history KV, by key
    epoch: int  # the hooks' epoch counter (agent KV)
    transactions: dict[int, Any]  # the embedder's shared_kv writes, by number


def _text(record: SystemRecord) -> str:
    return "".join(b.text for b in record.message.content if isinstance(b, TextBlock))


# The store's tables, by backend: SQLite's catalog, or PostgreSQL's in the store's schema
# (the session's search_path names it first).
_TABLES = {
    False: "SELECT name FROM sqlite_master WHERE type = 'table'",
    True: "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()",
}


def _read(
    tx: StoreTransaction, agent_id: str, modules: tuple[str, ...], *, postgres: bool = False
) -> Snapshot:
    migrations: dict[tuple[str, str], int] = Counter(
        (str(m), str(k)) for m, k in tx.sql.query("SELECT module, key FROM module_migrations")
    )
    rows: dict[tuple[str, str, str], int] = Counter()
    tables = {str(r[0]) for r in tx.sql.query(_TABLES[postgres])}
    for module in modules:
        if f"{module}_rows" in tables:
            for key, part in tx.sql.query(f"SELECT key, part FROM {module}_rows"):
                rows[(module, str(key), str(part))] += 1
    history = scope_prefix("agent", agent_id, HISTORY_AREA, "feature", MODULE)
    tool = scope_prefix("agent", agent_id, HISTORY_AREA, "tool", TOOL)
    kv = scope_prefix("agent", agent_id, KV_AREA, "feature", MODULE)
    shared = scope_prefix("system", "feature", TX_STORE)
    return Snapshot(
        state=read_durable(tx, agent_id),
        migrations=dict(migrations),
        rows=dict(rows),
        history_kv={k.removeprefix(history): v for k, v in tx.kv.scan(history)},
        tool_kv={k.removeprefix(tool): v for k, v in tx.kv.scan(tool)},
        epoch=int(tx.kv.read(kv + "epoch") or 0),
        transactions={
            int(k.removeprefix(shared + "tx")): v
            for k, v in tx.kv.scan(shared)
            if k.removeprefix(shared).startswith("tx")
        },
    )


class ExtensionChecks:
    """``E1``–``E4`` after each process of an ``extensions`` campaign."""

    def __init__(self, world: ChaosWorld, checker: Checker) -> None:
        self.world = world
        self.checker = checker
        self.counts: Counter[str] = Counter()

    def snapshot(self) -> Snapshot:
        """The disk, through a fresh open of the world's store (no process may be running)."""
        from agentkeep.persistence.postgres.store import PostgresStore

        agent_id = self.world.agent_id
        modules = (MODULE, "extaux")
        with open_store(self.world.home, database=self.world.database) as store:
            postgres = isinstance(store, PostgresStore)
            return store.read(lambda tx: _read(tx, agent_id, modules, postgres=postgres))

    def transactions_present(self) -> set[int]:
        """The embedder transactions whose ``shared_kv`` write is durable."""
        return set(self.snapshot().transactions)

    def after_process(
        self,
        report: ProcessReport,
        release: dict[str, tuple[str, ...]],
        transactions: list[Transaction],
        *,
        final: bool,
    ) -> list[Violation]:
        """Every check on the disk after ``report``'s process (``release``: the modules' keys
        that process opened with)."""
        snap = self.snapshot()
        process = report.generation
        found = [
            Violation(invariant=name, process=process, detail=detail)
            for name, detail in (
                *migration_findings(snap, release, final=final),
                *notice_findings(snap),
                *history_kv_findings(snap),
                *transaction_findings(snap, transactions),
            )
        ]
        self.counts["processes"] += 1
        self.counts["crashes"] += int(report.crashed)
        if final:
            self._count(snap, transactions)
        return found

    def _count(self, snap: Snapshot, transactions: list[Transaction]) -> None:
        log = _full_log(snap.state)
        texts = [_text(r) for r in log if isinstance(r, SystemRecord)]
        self.counts["message notices"] = sum(bool(_MESSAGE.match(t)) for t in texts)
        self.counts["inference notices"] = sum(bool(_INFERENCE.match(t)) for t in texts)
        self.counts["injected notices"] = sum(bool(_INJECT.match(t)) for t in texts)
        self.counts["compactions"] = len(snap.state.archived)
        self.counts["history kv keys"] = len(snap.history_kv)
        self.counts["tool history kv keys"] = len(snap.tool_kv)
        self.counts["migrations"] = sum(snap.migrations.values())
        for planned in transactions:
            self.counts[f"transactions {planned.outcome}"] += 1


Finding = tuple[str, str]


def migration_findings(
    snap: Snapshot, release: dict[str, tuple[str, ...]], *, final: bool
) -> list[Finding]:
    """``E1`` (see the module docstring)."""
    found: list[Finding] = []
    for module, keys in release.items():
        for key in keys:
            recorded = snap.migrations.get((module, key), 0)
            parts = [snap.rows.get((module, key, part), 0) for part in ("a", "b")]
            if recorded > 1:
                found.append(("E1", f"{module}/{key} recorded {recorded} times"))
            if recorded and parts != [1, 1]:
                found.append(("E1", f"{module}/{key} recorded, its rows a/b number {parts}"))
            if not recorded and parts != [0, 0]:
                found.append(("E1", f"{module}/{key} unrecorded, its rows a/b number {parts}"))
            if final and not recorded:
                found.append(("E1", f"{module}/{key} never applied by the healthy process"))
    return found


def _full_log(state: DurableState) -> list[ConversationRecord]:
    """Every record ever durable, in order, compaction records kept (they separate what a
    compaction archived from what followed it)."""
    return [r for epoch in state.archived for r in epoch.records] + list(state.records)


def _kind(record: ConversationRecord) -> tuple[str, str, int] | None:
    """``(kind, id, epoch)`` of one of the hooks' notices, else None."""
    if not isinstance(record, SystemRecord):
        return None
    text = _text(record)
    for kind, pattern in (("message", _MESSAGE), ("inference", _INFERENCE)):
        match = pattern.match(text)
        if match:
            return kind, match[1], int(match[2])
    match = _INJECT.match(text)
    return ("inject", match[1], -1) if match else None


def notice_findings(snap: Snapshot) -> list[Finding]:
    """``E2`` (see the module docstring). Neighbours are judged without the compaction
    records (a compaction may archive a notice and keep what follows it), but for two
    inference notices in a row: a compaction between them opened a new history."""
    found: list[Finding] = []
    full = _full_log(snap.state)
    log = [r for r in full if not isinstance(r, CompactionRecord)]
    kinds = [_kind(r) for r in log]
    seen = Counter((k[0], k[1]) for k in kinds if k is not None)
    for (what, ident), count in seen.items():
        if count > 1:
            found.append(("E2", f"the {what} notice of {ident} is in the history {count} times"))
    full_kinds = [_kind(r) for r in full]
    for index, kind in enumerate(full_kinds[1:], start=1):
        before = full_kinds[index - 1]
        if kind is not None and before is not None and kind[0] == before[0] == "inference":
            found.append(
                ("E2", f"inference notice {kind[1]} right after inference notice {before[1]}")
            )
    for index, record in enumerate(log):
        kind = kinds[index]
        before = kinds[index - 1] if index else None
        after = log[index + 1] if index + 1 < len(log) else None
        following = kinds[index + 1] if index + 1 < len(log) else None
        if kind is not None and kind[0] == "message":
            if not (isinstance(after, UserRecord) and after.message_id == kind[1]):
                found.append(("E2", f"message notice of {kind[1]} not right before its message"))
        elif kind is not None and kind[0] == "inject":
            if after is not None and (following is None or following[0] == "message"):
                found.append(("E2", f"injected notice of {kind[1]} not followed by its stage"))
        elif isinstance(record, UserRecord):
            if not (before is not None and before[:2] == ("message", record.message_id)):
                found.append(("E2", f"message {record.message_id} without its notice before it"))
        elif (
            isinstance(record, BlockRecord)
            and (index == 0 or not isinstance(log[index - 1], BlockRecord))
            and not (before is not None and before[0] == "inference")
        ):
            found.append(("E2", f"a response at {index} not right after an inference notice"))
    return found


def history_kv_findings(snap: Snapshot) -> list[Finding]:
    """``E3`` (see the module docstring)."""
    found: list[Finding] = []
    compactions = len(snap.state.archived)
    if snap.epoch != compactions:
        found.append(("E3", f"the epoch counter is {snap.epoch} after {compactions} compaction(s)"))
    epoch = snap.epoch
    current: dict[str, int] = {}
    for record in snap.state.records:
        kind = _kind(record)
        if kind is not None and kind[0] in ("message", "inference"):
            current[f"{kind[0][0]}-{kind[1]}"] = kind[2]
    for key, value in sorted(snap.history_kv.items()):
        if value != epoch:
            found.append(("E3", f"history KV {key!r} holds epoch {value} in epoch {epoch}"))
        elif key == "opened":
            continue
        elif current.get(key) != epoch:
            found.append(("E3", f"history KV {key!r} names no notice of the current history"))
    for key, written in sorted(current.items()):
        if written == epoch and key not in snap.history_kv:
            found.append(("E3", f"history KV {key!r} of the current history is missing"))
    if epoch and snap.history_kv.get("opened") != epoch:
        found.append(
            ("E3", f"the current history's opening key is {snap.history_kv.get('opened')}")
        )
    return found


def transaction_findings(snap: Snapshot, transactions: list[Transaction]) -> list[Finding]:
    """``E4`` (see the module docstring)."""
    found: list[Finding] = []
    state = snap.state
    present = {q.id for q in state.queued}
    present |= {
        r.message_id
        for r in [*state.records, *(r for e in state.archived for r in e.records)]
        if isinstance(r, UserRecord)
    }
    for planned in transactions:
        landed = [m for m in planned.ids if m in present]
        written = planned.number in snap.transactions
        name = f"transaction {planned.number} ({planned.outcome}, process {planned.process})"
        if landed and len(landed) != len(planned.ids):
            found.append(("E4", f"{name}: only {landed} of {list(planned.ids)} landed"))
        if bool(landed) != written:
            found.append(("E4", f"{name}: messages {landed} but its KV write {written}"))
        if planned.outcome.startswith("committed") and len(landed) != len(planned.ids):
            found.append(("E4", f"{name}: committed, yet only {landed} landed"))
        if planned.outcome in ("rolled back", "not run") and (landed or written):
            found.append(("E4", f"{name}: left {landed} (KV write {written})"))
    return found


__all__ = [
    "MODULE",
    "TX_STORE",
    "ExtensionChecks",
    "Snapshot",
    "Transaction",
    "history_kv_findings",
    "inference_notice",
    "inject_notice",
    "message_notice",
    "migration_findings",
    "notice_findings",
    "transaction_findings",
]
