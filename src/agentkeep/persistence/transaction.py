"""The :class:`~agentkeep.persistence.interface.Transaction` over one apsw connection.

Every statement goes through a :class:`~agentkeep.persistence.codec.Statements` executor,
which counts it as one store operation for the fault points. Each method is one or a few
statements; the conditional writes (``claim_*``, ``*_if_absent``, compare-and-set,
delete-if-present) are each a single statement whose change count says whether it won, so
they are atomic even without the enclosing transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import apsw
import msgspec

from agentkeep.errors import ExpiredScopeError, StoreError, UnknownAgentError
from agentkeep.model import (
    AgentRow,
    ConversationRecord,
    JSONObject,
    OwedWork,
    PendingToolCall,
    QueuedMessage,
    QueuedNotice,
    QueueName,
    Settings,
    ToolResultMessage,
)
from agentkeep.persistence.archive import ArchivedHistory
from agentkeep.persistence.codec import (
    Statements,
    agent_row,
    decode_any,
    decode_call,
    decode_message,
    decode_notice,
    decode_object,
    decode_owed,
    decode_record,
    decode_result,
    decode_settings,
    encode,
    encode_value,
    now_ms,
    prefix_upper_bound,
)
from agentkeep.persistence.kv import agent_prefix
from agentkeep.persistence.ledger import LedgerHub, LedgerStatements
from agentkeep.persistence.memo import MISSING
from agentkeep.persistence.turns import TurnStatements

__all__ = ["ReadOnlyTransactionError", "SqliteTransaction", "Statements"]

_QUEUE_ORDER = "CASE queue WHEN 'steering' THEN 0 ELSE 1 END, seq"
_NOTICE_TAIL = "notice"  # queue_tails key for notices (not a QueueName)


def _queue_rank(message: QueuedMessage) -> tuple[int, int]:
    """The sort key of ``_QUEUE_ORDER``."""
    return (0 if message.queue == "steering" else 1, message.seq)


class SqliteTransaction(ArchivedHistory, LedgerStatements, TurnStatements):
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
        # invariant). Every method below that writes a memoised fact records or forgets it
        # once its statement ran; a new transaction object starts a new work item in it.
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

    # -- message identities ------------------------------------------------------------------
    def claim_message_id(self, agent_id: str, message_id: str) -> bool:
        return (
            self._write(
                "INSERT OR IGNORE INTO message_ids (agent_id, message_id) VALUES (?, ?)",
                (agent_id, message_id),
            )
            == 1
        )

    def release_message_ids(self, agent_id: str, message_ids: list[str]) -> None:
        for message_id in message_ids:
            self._write(
                "DELETE FROM message_ids WHERE agent_id = ? AND message_id = ?",
                (agent_id, message_id),
            )

    # -- queues ------------------------------------------------------------------------------
    def _next_seq(self, agent_id: str, queue: str) -> int:
        # One statement: bump the durable high-water mark and read it back, so seqs grow
        # strictly per (agent, queue) across restarts and are never reused.
        self._check(write=True)
        cursor = self._statements.write(
            "INSERT INTO queue_tails (agent_id, queue, last_seq) VALUES (?, ?, 1) "
            "ON CONFLICT (agent_id, queue) DO UPDATE SET last_seq = last_seq + 1 "
            "RETURNING last_seq",
            (agent_id, queue),
        )
        seq = cursor.fetchall()[0][0]
        assert isinstance(seq, int)
        return seq

    def enqueue(self, agent_id: str, message: QueuedMessage) -> QueuedMessage:
        stored = msgspec.structs.replace(message, seq=self._next_seq(agent_id, message.queue))
        key = ("queue", agent_id)
        before = self._memo.get(key)
        self._memo.forget(key)
        self._write(
            "INSERT INTO queue (agent_id, queue, seq, message_id, envelope_json) "
            "VALUES (?, ?, ?, ?, ?)",
            (agent_id, stored.queue, stored.seq, stored.id, encode(stored)),
        )
        if before is not MISSING:
            self._memo.put(key, tuple(sorted((*before, stored), key=_queue_rank)))
        return stored

    def queued(self, agent_id: str, queue: QueueName | None = None) -> list[QueuedMessage]:
        """Steering before send when both are asked for (steering outranks sends)."""
        key = ("queue", agent_id)
        everything: tuple[QueuedMessage, ...] = self._memo_get(key)
        if everything is MISSING:
            cursor = self._read(
                f"SELECT envelope_json FROM queue WHERE agent_id = ? ORDER BY {_QUEUE_ORDER}",
                (agent_id,),
            )
            everything = tuple(decode_message(row[0]) for row in cursor)
            self._memo.put(key, everything)
        # The whole queue in (rank, seq) order, so each queue's own part is in seq order.
        if queue is None:
            return list(everything)
        return [message for message in everything if message.queue == queue]

    def dequeue(self, agent_id: str, queue: QueueName, seq: int) -> bool:
        key = ("queue", agent_id)
        before = self._memo.get(key)
        self._memo.forget(key)
        removed = (
            self._write(
                "DELETE FROM queue WHERE agent_id = ? AND queue = ? AND seq = ?",
                (agent_id, queue, seq),
            )
            == 1
        )
        if before is not MISSING and removed:
            kept = tuple(m for m in before if not (m.queue == queue and m.seq == seq))
            self._memo.put(key, kept)
        return removed

    def inject_notice(self, agent_id: str, notice: QueuedNotice) -> QueuedNotice:
        self._memo.forget(("notices", agent_id))
        stored = msgspec.structs.replace(notice, seq=self._next_seq(agent_id, _NOTICE_TAIL))
        self._write(
            "INSERT INTO notices (agent_id, seq, notice_json) VALUES (?, ?, ?)",
            (agent_id, stored.seq, encode(stored)),
        )
        return stored

    def notices(self, agent_id: str) -> list[QueuedNotice]:
        key = ("notices", agent_id)
        found: tuple[QueuedNotice, ...] = self._memo_get(key)
        if found is MISSING:
            cursor = self._read(
                "SELECT notice_json FROM notices WHERE agent_id = ? ORDER BY seq", (agent_id,)
            )
            found = tuple(decode_notice(row[0]) for row in cursor)
            self._memo.put(key, found)
        return list(found)

    def remove_notice(self, agent_id: str, seq: int) -> bool:
        self._memo.forget(("notices", agent_id))
        return (
            self._write("DELETE FROM notices WHERE agent_id = ? AND seq = ?", (agent_id, seq)) == 1
        )

    # -- tool batches ------------------------------------------------------------------------
    def put_pending_calls(self, agent_id: str, calls: list[PendingToolCall]) -> None:
        self._memo.forget(("calls", agent_id))
        for call in calls:
            self._write(
                "INSERT INTO pending_calls (agent_id, internal_id, idx, call_json, "
                "committed_json) VALUES (?, ?, ?, ?, ?)",
                (
                    agent_id,
                    call.internal_id,
                    call.index,
                    encode(call.call),
                    None if call.committed is None else encode(call.committed),
                ),
            )

    def pending_calls(self, agent_id: str) -> list[PendingToolCall]:
        key = ("calls", agent_id)
        found: tuple[PendingToolCall, ...] = self._memo_get(key)
        if found is MISSING:
            found = tuple(self._read_pending_calls(agent_id))
            self._memo.put(key, found)
        return list(found)

    def _read_pending_calls(self, agent_id: str) -> list[PendingToolCall]:
        cursor = self._read(
            "SELECT internal_id, idx, call_json, committed_json FROM pending_calls "
            "WHERE agent_id = ? ORDER BY idx, internal_id",
            (agent_id,),
        )
        return [
            PendingToolCall(
                internal_id=str(internal_id),
                index=int(index),
                call=decode_call(call_json),
                committed=None if committed is None else decode_result(committed),
            )
            for internal_id, index, call_json, committed in cursor
        ]

    def claim_tool_result(self, agent_id: str, internal_id: str, result: ToolResultMessage) -> bool:
        """First writer wins; False also when the call is not pending (no result without
        its call)."""
        return (
            self._write(
                "INSERT OR IGNORE INTO tool_result_claims (agent_id, internal_id, result_json) "
                "SELECT ?1, ?2, ?3 WHERE EXISTS (SELECT 1 FROM pending_calls "
                "WHERE agent_id = ?1 AND internal_id = ?2)",
                (agent_id, internal_id, encode(result)),
            )
            == 1
        )

    def tool_result_claim(self, agent_id: str, internal_id: str) -> ToolResultMessage | None:
        raw = self._one(
            "SELECT result_json FROM tool_result_claims WHERE agent_id = ? AND internal_id = ?",
            (agent_id, internal_id),
        )
        return None if raw is None else decode_result(raw)

    def mark_call_committed(
        self, agent_id: str, internal_id: str, result: ToolResultMessage
    ) -> bool:
        self._memo.forget(("calls", agent_id))
        return (
            self._write(
                "UPDATE pending_calls SET committed_json = ? "
                "WHERE agent_id = ? AND internal_id = ?",
                (encode(result), agent_id, internal_id),
            )
            == 1
        )

    def remove_pending_call(self, agent_id: str, internal_id: str) -> bool:
        # The claim cascades with the call (tool_result_claims' foreign key).
        self._memo.forget(("calls", agent_id))
        return (
            self._write(
                "DELETE FROM pending_calls WHERE agent_id = ? AND internal_id = ?",
                (agent_id, internal_id),
            )
            == 1
        )

    # -- per-agent facts ---------------------------------------------------------------------
    def read_settings(self, agent_id: str) -> Settings | None:
        # write_settings (their only writer) keeps the remembered JSON true.
        key = ("settings", agent_id)
        raw = self._memo_get(key)
        if raw is MISSING:
            raw = self._one("SELECT settings_json FROM settings WHERE agent_id = ?", (agent_id,))
            raw = None if raw is None else str(raw)
            self._memo.put(key, raw)
        return None if raw is None else decode_settings(raw)

    def write_settings(self, agent_id: str, settings: Settings) -> None:
        text = encode(settings)
        key = ("settings", agent_id)
        self._memo.forget(key)
        self._write(
            "INSERT INTO settings (agent_id, settings_json) VALUES (?, ?) "
            "ON CONFLICT (agent_id) DO UPDATE SET settings_json = excluded.settings_json",
            (agent_id, text),
        )
        self._memo.put(key, text)

    def read_owed(self, agent_id: str) -> OwedWork | None:
        key = ("owed", agent_id)
        raw = self._memo_get(key)
        if raw is MISSING:
            raw = self._one("SELECT owed_json FROM owed_work WHERE agent_id = ?", (agent_id,))
            raw = None if raw is None else str(raw)
            self._memo.put(key, raw)
        return None if raw is None else decode_owed(raw)

    def write_owed(self, agent_id: str, owed: OwedWork) -> None:
        # The WHERE skips the write when the stored value is identical (canonical JSON).
        key, text = ("owed", agent_id), encode(owed)
        self._memo.forget(key)
        self._write(
            "INSERT INTO owed_work (agent_id, owed_json) VALUES (?, ?) "
            "ON CONFLICT (agent_id) DO UPDATE SET owed_json = excluded.owed_json "
            "WHERE owed_json IS NOT excluded.owed_json",
            (agent_id, text),
        )
        self._memo.put(key, text)

    def claim_owed(self, agent_id: str, owed: OwedWork) -> bool:
        key, text = ("owed", agent_id), encode(owed)
        before = self._memo.get(key)
        self._memo.forget(key)
        claimed = (
            self._write(
                "INSERT OR IGNORE INTO owed_work (agent_id, owed_json) VALUES (?, ?)",
                (agent_id, text),
            )
            == 1
        )
        if claimed:
            self._memo.put(key, text)
        elif before is not MISSING:  # ignored: the row is what it was
            self._memo.put(key, before)
        return claimed

    def delete_owed(self, agent_id: str) -> bool:
        key = ("owed", agent_id)
        self._memo.forget(key)
        deleted = self._write("DELETE FROM owed_work WHERE agent_id = ?", (agent_id,)) == 1
        self._memo.put(key, None)
        return deleted

    def agents_owing_work(self) -> list[str]:
        cursor = self._read(
            "SELECT o.agent_id FROM owed_work AS o JOIN agents AS a ON a.id = o.agent_id "
            "WHERE a.deleted_at_ms IS NULL ORDER BY o.agent_id"
        )
        return [str(row[0]) for row in cursor]

    def read_context_tokens(self, agent_id: str) -> int | None:
        key = ("tokens", agent_id)
        raw = self._memo_get(key)
        if raw is MISSING:
            raw = self._one("SELECT tokens FROM context_tokens WHERE agent_id = ?", (agent_id,))
            raw = None if raw is None else int(raw)
            self._memo.put(key, raw)
        return None if raw is None else int(raw)

    def write_context_tokens(self, agent_id: str, tokens: int | None) -> None:
        key = ("tokens", agent_id)
        self._memo.forget(key)
        if tokens is None:
            self._write("DELETE FROM context_tokens WHERE agent_id = ?", (agent_id,))
        else:
            self._write(
                "INSERT INTO context_tokens (agent_id, tokens) VALUES (?, ?) "
                "ON CONFLICT (agent_id) DO UPDATE SET tokens = excluded.tokens",
                (agent_id, tokens),
            )
        self._memo.put(key, tokens)

    # -- sorted key-value table --------------------------------------------------------------
    def kv_read(self, key: str) -> Any | None:
        raw = self._one("SELECT value_json FROM kv WHERE key = ?", (key,))
        return None if raw is None else decode_any(raw)

    def kv_list(self, prefix: str) -> list[tuple[str, Any]]:
        return [(key, decode_any(raw)) for key, raw in self._scan(prefix)]

    def _scan(self, prefix: str) -> Iterator[tuple[str, str]]:
        upper = prefix_upper_bound(prefix)
        if upper is None:
            cursor = self._read(
                "SELECT key, value_json FROM kv WHERE key >= ? ORDER BY key", (prefix,)
            )
        else:
            cursor = self._read(
                "SELECT key, value_json FROM kv WHERE key >= ? AND key < ? ORDER BY key",
                (prefix, upper),
            )
        for key, raw in cursor:
            yield str(key), str(raw)

    def kv_write(self, key: str, value: Any) -> None:
        self._write(
            "INSERT INTO kv (key, value_json) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value_json = excluded.value_json",
            (key, encode_value(value)),
        )

    def kv_delete(self, key: str) -> bool:
        return self._write("DELETE FROM kv WHERE key = ?", (key,)) == 1

    def kv_clear(self, prefix: str) -> int:
        upper = prefix_upper_bound(prefix)
        if upper is None:
            return self._write("DELETE FROM kv WHERE key >= ?", (prefix,))
        return self._write("DELETE FROM kv WHERE key >= ? AND key < ?", (prefix, upper))

    def kv_write_if_absent(self, key: str, value: Any) -> bool:
        return (
            self._write(
                "INSERT OR IGNORE INTO kv (key, value_json) VALUES (?, ?)",
                (key, encode_value(value)),
            )
            == 1
        )

    def kv_compare_and_set(self, key: str, expected: Any | None, value: Any) -> bool:
        if expected is None:
            return self.kv_write_if_absent(key, value)
        # Canonical (sorted-key) JSON on both sides, so equal values compare equal in SQL.
        return (
            self._write(
                "UPDATE kv SET value_json = ? WHERE key = ? AND value_json = ?",
                (encode_value(value), key, encode(expected)),
            )
            == 1
        )

    def kv_delete_if_present(self, key: str) -> bool:
        return self.kv_delete(key)


class ReadOnlyTransactionError(StoreError):
    """A write was attempted on a read-only snapshot (``StoreHandle.read``)."""

    code = "read_only_transaction"


def _first(cursor: Any) -> Any:
    """The first row of a read (None if none), its statement run to the end: a statement
    left mid-result keeps a read transaction open on the writer's connection, and a
    checkpoint there then fails with SQLITE_LOCKED ("database table is locked")."""
    rows = cursor.fetchall()
    return rows[0] if rows else None
