"""The :class:`~agentkeep.persistence.interface.Transaction` over one apsw connection.

Every statement goes through a :class:`~agentkeep.persistence.codec.Statements` executor,
which counts it as one store operation for the fault points. Each method is one or a few
statements; the conditional writes (``claim_*``, ``*_if_absent``, compare-and-set,
delete-if-present) are each a single statement whose change count says whether it won, so
they are atomic even without the enclosing transaction.

This module holds the core (scope checks, the executor, the memo, raw statements for modules
that own their tables), the agents and the conversation records; the other statements are
mixins, one module each: the ledger (``ledger``), turns (``turns``), archived history
(``archive``), queued input (``queue_statements``), pending tool calls
(``call_statements``), single-row session facts (``fact_statements``) and the ``kv`` table
(``kv_statements``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import apsw

from agentkeep.errors import ExpiredScopeError, StoreError, UnknownAgentError
from agentkeep.persistence.archive import ArchivedHistory
from agentkeep.persistence.call_statements import CallStatements
from agentkeep.persistence.codec import (
    Statements,
    agent_row,
    decode_object,
    decode_record,
    encode,
    now_ms,
)
from agentkeep.persistence.fact_statements import FactStatements
from agentkeep.persistence.kv import agent_prefix
from agentkeep.persistence.kv_statements import KvStatements
from agentkeep.persistence.ledger import LedgerHub, LedgerStatements
from agentkeep.persistence.memo import MISSING
from agentkeep.persistence.queue_statements import QueueStatements
from agentkeep.persistence.turns import TurnStatements
from agentkeep.types import AgentRow, ConversationRecord, JSONObject

__all__ = ["ReadOnlyTransactionError", "SqliteTransaction", "Statements"]


class SqliteTransaction(
    ArchivedHistory,
    LedgerStatements,
    TurnStatements,
    QueueStatements,
    CallStatements,
    FactStatements,
    KvStatements,
):
    """A :class:`~agentkeep.persistence.interface.Transaction` valid while its work runs.

    Args:
        statements: The executor of the enclosing SQLite transaction.
        read_only: If True every write method raises :class:`ReadOnlyTransactionError`.
        ledger: The hub told (after COMMIT) of each event appended, and the event size
            limit (None: the default limit, nobody told).
    """

    def __init__(
        self, statements: Statements, *, read_only: bool = False, ledger: LedgerHub | None = None
    ) -> None:
        self._ledger = ledger
        self._statements = statements
        self._read_only = read_only
        self._active = True
        self._after_commit: list[Callable[[], None]] = []
        # What the store holds, remembered across statements (persistence/memo.py states the
        # invariant). Every method below or of a statement mixin that writes a memoised fact
        # records or forgets it once its statement ran; a new transaction object starts a new
        # work item in it.
        self._memo = statements.memo
        self._memo.new_transaction_object()
        # Ledger rows appended but not yet written (LedgerStatements.append_event).
        self._pending_events: list[tuple[Any, ...]] = []

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        return self._active

    def expire(self) -> list[Callable[[], None]]:
        """End this transaction's validity; returns the registered after-commit callbacks."""
        self._active = False
        # Buffered events are written before the item's RELEASE; any left over belong to an
        # item that failed, whose savepoint is rolled back: drop them.
        self._pending_events.clear()
        if self._statements.flush == self._flush_events:
            self._statements.flush = None
        callbacks, self._after_commit = self._after_commit, []
        return callbacks

    def after_commit(self, callback: Callable[[], None]) -> None:
        self._check(write=False)
        if self._read_only:
            raise ReadOnlyTransactionError("after_commit is meaningless in a read.")
        self._after_commit.append(callback)

    def _check(self, *, write: bool) -> None:
        if not self._active:
            raise ExpiredScopeError("This transaction has ended; start a new one.")
        if write and self._read_only:
            raise ReadOnlyTransactionError("This is a read-only snapshot; use transact().")

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> apsw.Cursor:
        self._check(write=False)
        return self._statements.execute(sql, params)

    def _write(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        # Only for statements whose method keeps the memo true (see Statements.write).
        self._check(write=True)
        self._statements.write(sql, params)
        return self._statements.changes()

    def _memo_get(self, key: tuple[str, ...]) -> Any:
        self._check(write=False)
        return self._memo.get(key)

    def _one(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        row = _first(self._read(sql, params))
        return None if row is None else row[0]

    # -- statements of modules that own their tables (agentkeep.registry) --------------------
    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run one read statement in this transaction and return every row it yields.

        All rows are fetched before returning: the executor reuses one cursor.
        """
        return list(self._read(sql, params).fetchall())

    def query_remembered(
        self, agent_id: str, sql: str, params: tuple[Any, ...] = ()
    ) -> list[tuple[Any, ...]]:
        """:meth:`query`, its rows remembered by the writer until anything may change them.

        Only for a read of the agent's rows in tables written by :meth:`execute` alone (which
        forgets everything it could change) or by the ``agents`` cascade (``create_agent``
        forgets the agent); e.g. ``sessions`` and the immutable ``definition_revisions``.
        """
        key = ("query", agent_id, sql, *map(repr, params))
        known: tuple[tuple[Any, ...], ...] = self._memo_get(key)
        if known is MISSING:
            known = tuple(self._read(sql, params).fetchall())
            self._memo.put(key, known)
        return list(known)

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        """Run one write statement in this transaction; returns how many rows it changed.
        Refused (``ReadOnlyTransactionError``) in a read. The memo cannot know what it
        changed, so it forgets everything (until the next transaction)."""
        self._check(write=True)
        # Even a statement the executor would follow (a SAVEPOINT of the writer's name). The
        # executor writes the item's buffered events first, so the statement sees them.
        self._memo.clear()
        self._statements.execute(sql, params)
        return self._statements.changes()

    # -- agents ------------------------------------------------------------------------------
    def create_agent(self, row: AgentRow) -> bool:
        self._check(write=True)
        existing = self._read("SELECT deleted_at_ms IS NULL FROM agents WHERE id = ?", (row.id,))
        live = _first(existing)
        if live is not None and live[0]:
            return False
        # Cascades wipe the previous agent's records, queues, calls and facts; its kv rows
        # live under its prefix and go with a range delete.
        self._write("DELETE FROM agents WHERE id = ?", (row.id,))
        # The cascade wiped everything the previous life stored: forget all of it.
        self._memo.forget_agent(row.id)
        self.kv_clear(agent_prefix(row.id))
        self._write(
            "INSERT INTO agents (id, config_json, metadata_json, parent_id, created_at_ms) "
            "VALUES (?, ?, ?, ?, ?)",
            (
                row.id,
                encode(row.config),
                encode(row.metadata),
                row.parent_id,
                row.created_at_ms or now_ms(),
            ),
        )
        return True

    def get_agent(self, agent_id: str) -> AgentRow | None:
        # create_agent, delete_agent and update_metadata forget what they change.
        key = ("agent", agent_id)
        known: AgentRow | None = self._memo_get(key)
        if known is not MISSING:
            return known
        cursor = self._read(
            "SELECT id, config_json, metadata_json, parent_id, created_at_ms FROM agents "
            "WHERE id = ? AND deleted_at_ms IS NULL",
            (agent_id,),
        )
        row = _first(cursor)
        found = None if row is None else agent_row(row)
        self._memo.put(key, found)
        return found

    def list_agents(self) -> list[AgentRow]:
        cursor = self._read(
            "SELECT id, config_json, metadata_json, parent_id, created_at_ms FROM agents "
            "WHERE deleted_at_ms IS NULL ORDER BY created_at_ms, id"
        )
        return [agent_row(row) for row in cursor]

    def delete_agent(self, agent_id: str) -> bool:
        # Its children's rows change too (parent_id): forget every remembered agents row.
        self._memo.forget_kind("agent")
        deleted = self._write(
            "UPDATE agents SET deleted_at_ms = ? WHERE id = ? AND deleted_at_ms IS NULL",
            (now_ms(), agent_id),
        )
        if deleted:
            self._write("UPDATE agents SET parent_id = NULL WHERE parent_id = ?", (agent_id,))
        return deleted == 1

    def update_metadata(self, agent_id: str, patch: JSONObject) -> JSONObject:
        raw = self._one(
            "SELECT metadata_json FROM agents WHERE id = ? AND deleted_at_ms IS NULL",
            (agent_id,),
        )
        if raw is None:
            raise UnknownAgentError(agent_id)
        merged = {**decode_object(raw), **patch}
        self._memo.forget(("agent", agent_id))
        self._write("UPDATE agents SET metadata_json = ? WHERE id = ?", (encode(merged), agent_id))
        return merged

    def children_of(self, agent_id: str) -> list[str]:
        cursor = self._read(
            "SELECT id FROM agents WHERE parent_id = ? AND deleted_at_ms IS NULL ORDER BY id",
            (agent_id,),
        )
        return [str(row[0]) for row in cursor]

    # -- conversation records ----------------------------------------------------------------
    def load_records(self, agent_id: str) -> list[ConversationRecord]:
        cursor = self._read(
            "SELECT record_json FROM records WHERE agent_id = ? ORDER BY position", (agent_id,)
        )
        return [decode_record(row[0]) for row in cursor]

    def record_count(self, agent_id: str) -> int:
        key = ("record_count", agent_id)
        count = self._memo_get(key)
        if count is MISSING:
            count = int(self._one("SELECT count(*) FROM records WHERE agent_id = ?", (agent_id,)))
            self._memo.put(key, count)
        return int(count)

    def append_record(self, agent_id: str, record: ConversationRecord) -> int:
        self._check(write=True)
        # Positions are dense from 1 (replace_records renumbers), so the next one follows
        # the durable tail.
        key = ("record_tail", agent_id)
        last = self._memo.get(key)
        if last is MISSING:
            last = self._one(
                "SELECT coalesce(max(position), 0) FROM records WHERE agent_id = ?", (agent_id,)
            )
        position = 1 + int(last)
        self._write(
            "INSERT INTO records (agent_id, position, record_json) VALUES (?, ?, ?)",
            (agent_id, position, encode(record)),
        )
        self._memo.put(key, position)
        count = self._memo.get(("record_count", agent_id))
        if count is not MISSING:
            self._memo.put(("record_count", agent_id), count + 1)
        return position

    def _forget_records(self, agent_id: str) -> None:
        self._memo.forget(("record_tail", agent_id))
        self._memo.forget(("record_count", agent_id))

    def replace_records(
        self, agent_id: str, through_position: int, replacement: ConversationRecord
    ) -> None:
        if through_position < 0:
            raise ValueError(f"through_position must be >= 0, got {through_position}")
        self._forget_records(agent_id)
        # Invariant: positions are always exactly 1..count, so a position is also the
        # number of records up to it (callers snapshot a count and pass it here). Records
        # that joined after the snapshot shift down behind the replacement at position 1.
        self._write(
            "DELETE FROM records WHERE agent_id = ? AND position <= ?",
            (agent_id, through_position),
        )
        # Two steps through negative positions: shifting in place could collide with a row
        # not yet moved (the primary key is checked row by row).
        self._write(
            "UPDATE records SET position = -(position - ?) - 1 WHERE agent_id = ?",
            (through_position, agent_id),
        )
        self._write(
            "UPDATE records SET position = -position WHERE agent_id = ? AND position < 0",
            (agent_id,),
        )
        self._write(
            "INSERT INTO records (agent_id, position, record_json) VALUES (?, 1, ?)",
            (agent_id, encode(replacement)),
        )

    def rewrite_records(self, agent_id: str, records: list[ConversationRecord]) -> None:
        self._forget_records(agent_id)
        self._write("DELETE FROM records WHERE agent_id = ?", (agent_id,))
        for position, record in enumerate(records, start=1):
            self._write(
                "INSERT INTO records (agent_id, position, record_json) VALUES (?, ?, ?)",
                (agent_id, position, encode(record)),
            )


class ReadOnlyTransactionError(StoreError):
    """A write was attempted on a read-only snapshot (``StoreHandle.read``)."""

    code = "read_only_transaction"


def _first(cursor: Any) -> Any:
    """The first row of a read (None if none), its statement run to the end: a statement
    left mid-result keeps a read transaction open on the writer's connection, and a
    checkpoint there then fails with SQLITE_LOCKED ("database table is locked")."""
    rows = cursor.fetchall()
    return rows[0] if rows else None
