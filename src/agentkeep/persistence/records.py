"""``tx.records``: an agent's conversation records, inside one transaction.

Invariants:

- Positions are dense from 1: a record's position is also the number of records up to it
  (:meth:`RecordStatements.replace` renumbers, :meth:`RecordStatements.rewrite` starts over).
- The writer's memo remembers each agent's last position (``("record_tail", id)``) and count
  (``("record_count", id)``); every write here records or forgets them.
"""

from __future__ import annotations

from agentkeep.persistence.codec import decode_record, encode
from agentkeep.persistence.executor import TableStatements
from agentkeep.persistence.memo import MISSING
from agentkeep.types.records import ConversationRecord

__all__ = ["RecordStatements"]


class RecordStatements(TableStatements):
    """The conversation records over the enclosing transaction (see the module)."""

    def load(self, agent_id: str) -> list[ConversationRecord]:
        """The whole conversation, in position order."""
        cursor = self._read(
            "SELECT record_json FROM records WHERE agent_id = ? ORDER BY position", (agent_id,)
        )
        return [decode_record(row[0]) for row in cursor]

    def count(self, agent_id: str) -> int:
        """How many records the conversation holds."""
        key = ("record_count", agent_id)
        count = self._memo_get(key)
        if count is MISSING:
            count = int(self._one("SELECT count(*) FROM records WHERE agent_id = ?", (agent_id,)))
            self._memo.put(key, count)
        return int(count)

    def append(self, agent_id: str, record: ConversationRecord) -> int:
        """Append; returns the record's position (1-based, dense)."""
        self._check(write=True)
        # Positions are dense from 1 (replace renumbers), so the next one follows the
        # durable tail.
        key = ("record_tail", agent_id)
        last = self._memo.get(key)
        if last is MISSING:
            last = self._one(
                "SELECT coalesce(max(position), 0) FROM records WHERE agent_id = ?", (agent_id,)
            )
        position = 1 + int(last)
        self._send(
            "INSERT INTO records (agent_id, position, record_json) VALUES (?, ?, ?)",
            (agent_id, position, encode(record)),
        )
        self._memo.put(key, position)
        count = self._memo.get(("record_count", agent_id))
        if count is not MISSING:
            self._memo.put(("record_count", agent_id), count + 1)
        return position

    def _forget(self, agent_id: str) -> None:
        self._memo.forget(("record_tail", agent_id))
        self._memo.forget(("record_count", agent_id))

    def replace(
        self, agent_id: str, through_position: int, replacement: ConversationRecord
    ) -> None:
        """Compaction: delete records 1..through_position and put ``replacement`` first,
        keeping every later record (those that joined after the snapshot) after it."""
        if through_position < 0:
            raise ValueError(f"through_position must be >= 0, got {through_position}")
        self._forget(agent_id)
        # Invariant: positions are always exactly 1..count, so a position is also the
        # number of records up to it (callers snapshot a count and pass it here). Records
        # that joined after the snapshot shift down behind the replacement at position 1.
        self._send(
            "DELETE FROM records WHERE agent_id = ? AND position <= ?",
            (agent_id, through_position),
        )
        # Two steps through negative positions: shifting in place could collide with a row
        # not yet moved (the primary key is checked row by row).
        self._send(
            "UPDATE records SET position = -(position - ?) - 1 WHERE agent_id = ?",
            (through_position, agent_id),
        )
        self._send(
            "UPDATE records SET position = -position WHERE agent_id = ? AND position < 0",
            (agent_id,),
        )
        self._send(
            "INSERT INTO records (agent_id, position, record_json) VALUES (?, 1, ?)",
            (agent_id, encode(replacement)),
        )

    def rewrite(self, agent_id: str, records: list[ConversationRecord]) -> None:
        """Replace the whole conversation (load repair, model reset)."""
        self._forget(agent_id)
        self._send("DELETE FROM records WHERE agent_id = ?", (agent_id,))
        for position, record in enumerate(records, start=1):
            self._send(
                "INSERT INTO records (agent_id, position, record_json) VALUES (?, ?, ?)",
                (agent_id, position, encode(record)),
            )
