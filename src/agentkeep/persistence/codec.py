"""How values meet SQLite: canonical JSON (msgspec) and the statement executor.

Every value stored is JSON text from one sorted-key encoder, so equal values are equal text
(``write_owed`` skips identical writes and ``tx.kv.compare_and_set`` compares in SQL on that),
and each column decodes with the exact type (tagged unions for records).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import apsw
import msgspec

from agentkeep.persistence import clock
from agentkeep.persistence.dialect import SQLITE, Dialect
from agentkeep.persistence.faults import FaultInjector
from agentkeep.persistence.memo import BEGIN_GROUP, BEGIN_ITEM, WriterMemo
from agentkeep.types import Settings, ToolCallBlock, ToolResultMessage
from agentkeep.types.records import (
    AgentRow,
    ConversationRecord,
    OwedWork,
    QueuedMessage,
    QueuedNotice,
)

# One encoder for everything: sorted keys make equal values encode to equal text, which
# write_owed (skip identical) and kv.compare_and_set (compare in SQL) rely on.
_encoder = msgspec.json.Encoder(order="sorted")
decode_record = msgspec.json.Decoder(ConversationRecord).decode
decode_object = msgspec.json.Decoder(dict[str, Any]).decode
decode_any = msgspec.json.Decoder().decode
decode_message = msgspec.json.Decoder(QueuedMessage).decode
decode_notice = msgspec.json.Decoder(QueuedNotice).decode
decode_call = msgspec.json.Decoder(ToolCallBlock).decode
decode_result = msgspec.json.Decoder(ToolResultMessage).decode
decode_settings = msgspec.json.Decoder(Settings).decode
decode_owed = msgspec.json.Decoder(OwedWork).decode


def encode(value: Any) -> str:
    # Text, not bytes: apsw binds bytes as BLOB, and TEXT columns must compare as text.
    return _encoder.encode(value).decode()


def now_ms() -> int:
    """Now, in milliseconds: the store's clock on its writer's thread (``persistence.clock``)."""
    return clock.now_ms()


def prefix_upper_bound(prefix: str) -> str | None:
    """The smallest string greater than every string starting with ``prefix`` (None: none)."""
    chars = list(prefix)
    while chars:
        last = ord(chars.pop())
        if last < 0x10FFFF:
            successor = last + 1
            if 0xD800 <= successor <= 0xDFFF:  # skip surrogates: not valid in UTF-8 text
                successor = 0xE000
            return "".join(chars) + chr(successor)
    return None


class Statements:
    """Runs statements on one connection, counting each as a store operation.

    It also keeps the connection's :class:`~agentkeep.persistence.memo.WriterMemo`
    (``memo``): reads go straight through; a write goes through :meth:`write` when the method
    issuing it keeps the memo true, else (raw SQL, the writer's BEGIN/SAVEPOINT/RELEASE/COMMIT)
    the memo is told before and after it runs.

    It is the one place SQL text reaches the connection, so the backend's
    :class:`~agentkeep.persistence.dialect.Dialect` prepares every statement here.
    """

    def __init__(
        self,
        connection: apsw.Connection,
        faults: FaultInjector | None = None,
        *,
        dialect: Dialect = SQLITE,
    ) -> None:
        self.connection = connection
        self._faults = faults
        self.dialect = dialect
        self._prepare = dialect.prepare if dialect.translates else None
        # One reused cursor (cheaper than a new one per statement). Safe because every
        # Transaction method consumes its rows before it returns (``_first``), so no
        # statement is ever still being read when the next one starts; the writer also
        # resets it after a rollback and before a checkpoint of its own (``reset``).
        self._cursor = connection.cursor()
        self.memo = WriterMemo()
        self._kept = False
        self._sending = False  # the statement running now is sent, not waited for (send)
        # The running work item's buffered writes (its ledger events), written by one
        # statement before any other statement runs that is not a memo-keeping write: a read,
        # raw SQL, the item's RELEASE. Set by the transaction; None when nothing is buffered.
        self.flush: Callable[[], None] | None = None
        # The running work item's ledger marks (session -> its last sequence appended), kept
        # only for a writer that tells other processes of its commits (a partitioned store
        # on PostgreSQL; see its writer); None: nobody collects them.
        self.announced: dict[str, int] | None = None

    def tick(self, label: str) -> None:
        """Count one operation that is not a statement (e.g. "after COMMIT")."""
        if self._faults is not None:
            self._faults.tick(label)

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> apsw.Cursor:
        # Read before the flush, which runs statements of its own (and resets both).
        kept, sending = self._kept, self._sending
        if self.flush is not None and not kept:
            if sql in (BEGIN_ITEM, BEGIN_GROUP):  # left by an item that failed: not written
                self.flush = None
            else:
                self.flush()
        if self._faults is not None:
            self._faults.tick(sql)
        # The memo follows the statements as written (SQLite's spelling, every backend).
        text = sql if self._prepare is None else self._prepare(sql)
        cursor: Any = self._cursor  # apsw's, or PostgreSQL's (which can also ``send``)
        run = cursor.send if sending else cursor.execute  # send: see ``send``
        if kept or sql.startswith("SELECT"):
            return run(text, params)  # type: ignore[no-any-return]
        memo = self.memo
        memo.before(sql)
        ran = run(text, params)
        if not sending:  # a statement sent is told to the memo by its caller
            memo.after(sql)
        return ran  # type: ignore[no-any-return]

    def write(self, sql: str, params: tuple[Any, ...] = ()) -> apsw.Cursor:
        """Run a write whose caller keeps the memo true (it records or forgets what the
        statement changed, once it ran)."""
        self._kept = True
        try:
            return self.execute(sql, params)
        finally:
            self._kept = False

    @property
    def sends(self) -> bool:
        """True if this connection can send a statement without waiting for it
        (PostgreSQL's batches); SQLite runs every statement at once."""
        return hasattr(self._cursor, "send")

    def send(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        """A memo-keeping write (as :meth:`write`) whose caller reads neither its change
        count nor its result: a backend that can (PostgreSQL in a batch) sends it without
        waiting for it. If it fails, the next statement of the same work item that waits
        raises its error, at the latest the item's end (its ``RELEASE``, or the end of a lone
        item), so the item fails as it would have at this statement: nothing of it is
        written, its memo layer is dropped. SQLite runs it at once."""
        if not self.sends:
            self.write(sql, params)
            return
        self._kept = self._sending = True
        try:
            self.execute(sql, params)
        finally:
            self._kept = self._sending = False

    def send_raw(self, sql: str) -> None:
        """Raw SQL (the writer's ``SAVEPOINT`` and ``RELEASE``, a reader's ``BEGIN`` and
        ``ROLLBACK``) sent without waiting (see :meth:`send`; only on a connection that
        :attr:`sends`). The memo is told before it as by :meth:`execute`, not after: the
        caller calls ``memo.after(sql)`` once the batch that sent it ended without error."""
        if not self.sends:
            raise TypeError("send_raw needs a connection that sends statements in batches")
        self._sending = True
        try:
            self.execute(sql)
        finally:
            self._sending = False

    def end_item(self) -> None:
        """End a work item run without a savepoint (a group's lone item) as its ``RELEASE``
        would: its buffered writes are written, then its memo layer joins the group's."""
        if self.flush is not None:
            self.flush()
        self.memo.end_item()

    def changes(self) -> int:
        return int(self.connection.changes())

    def reset(self) -> None:
        """End whatever statement the reused cursor still holds (after a rollback, before a
        checkpoint on this connection): an unfinished one keeps a read transaction open, and
        SQLite refuses to checkpoint under it (SQLITE_LOCKED)."""
        self._cursor.close(force=True)
        self._cursor = self.connection.cursor()


def encode_value(value: Any) -> str:
    if value is None:
        raise ValueError("None means absent in the kv table; delete the key instead")
    return encode(value)


def agent_row(row: Any) -> AgentRow:
    agent_id, config_json, metadata_json, parent_id, created_at_ms = row
    return AgentRow(
        id=str(agent_id),
        config=decode_object(config_json),
        metadata=decode_object(metadata_json),
        parent_id=None if parent_id is None else str(parent_id),
        created_at_ms=int(created_at_ms),
    )
