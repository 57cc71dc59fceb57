"""``tx.archive``: archived history, inside one transaction.

What a model switch or a compaction takes out of the provider's view is copied here, in the
same transaction, before it leaves the conversation: ``archived_epochs`` holds one row per
archived stretch, ``archived_records`` its records in order. Only :meth:`ArchiveStatements.purge`
deletes them, and it keeps the epoch rows (``purged_at_ms``) so numbers are never reused.
"""

from __future__ import annotations

from typing import Any, cast

from agentkeep.persistence.codec import decode_record, decode_settings, encode, now_ms
from agentkeep.persistence.executor import TableStatements
from agentkeep.types import Settings
from agentkeep.types.records import ArchivedEpoch, ArchiveReason

__all__ = ["ArchiveStatements"]


class ArchiveStatements(TableStatements):
    """Archived epochs over the enclosing transaction's statements (see the module)."""

    def add_epoch(
        self,
        agent_id: str,
        through_position: int | None,
        *,
        reason: ArchiveReason,
        settings: Settings | None,
    ) -> int | None:
        """Copy records 1..through_position (all of them when None) into a new archived
        epoch, before a reset or a compaction removes them from the conversation; returns
        the epoch's number, or None (and archives nothing) when there is no such record."""
        self._check(write=True)
        bound = through_position if through_position is not None else -1
        count = int(
            self._one(
                "SELECT count(*) FROM records WHERE agent_id = ? AND (? < 0 OR position <= ?)",
                (agent_id, bound, bound),
            )
        )
        if count == 0:
            return None
        # Epochs count up per agent and are never reused: purged epochs keep their row.
        epoch = 1 + int(
            self._one(
                "SELECT coalesce(max(epoch), 0) FROM archived_epochs WHERE agent_id = ?",
                (agent_id,),
            )
        )
        self._send(
            "INSERT INTO archived_epochs (agent_id, epoch, reason, settings_json, "
            "archived_at_ms) VALUES (?, ?, ?, ?, ?)",
            (agent_id, epoch, reason, None if settings is None else encode(settings), now_ms()),
        )
        self._send(
            "INSERT INTO archived_records (agent_id, epoch, position, record_json) "
            "SELECT agent_id, ?, position, record_json FROM records "
            "WHERE agent_id = ? AND (? < 0 OR position <= ?)",
            (epoch, agent_id, bound, bound),
        )
        return epoch

    def epochs(self, agent_id: str) -> list[ArchivedEpoch]:
        """The archived epochs not yet purged, oldest first, each with its records."""
        epochs: list[ArchivedEpoch] = []
        cursor = self._read(
            "SELECT epoch, reason, settings_json, archived_at_ms FROM archived_epochs "
            "WHERE agent_id = ? AND purged_at_ms IS NULL ORDER BY epoch",
            (agent_id,),
        )
        rows: list[Any] = cursor.fetchall()  # read whole: the loop runs more statements
        for epoch, reason, settings_json, archived_at_ms in rows:
            records = tuple(
                decode_record(row[0])
                for row in self._read(
                    "SELECT record_json FROM archived_records WHERE agent_id = ? AND epoch = ? "
                    "ORDER BY position",
                    (agent_id, epoch),
                )
            )
            # The column's CHECK constraint keeps reason one of ArchiveReason's values.
            epochs.append(
                ArchivedEpoch(
                    epoch=int(epoch),
                    reason=cast(ArchiveReason, reason),
                    archived_at_ms=int(archived_at_ms),
                    records=records,
                    settings=None if settings_json is None else decode_settings(str(settings_json)),
                )
            )
        return epochs

    def last_epoch(self, agent_id: str) -> int:
        """The highest epoch number ever archived (purged ones included); 0 if none."""
        return int(
            self._one(
                "SELECT coalesce(max(epoch), 0) FROM archived_epochs WHERE agent_id = ?",
                (agent_id,),
            )
        )

    def purge(self, agent_id: str) -> tuple[int, int]:
        """Physically delete every archived record of the agent (the current conversation is
        untouched); returns ``(epochs, records)`` purged. Epoch numbers are not reused."""
        self._check(write=True)
        epochs = int(
            self._one(
                "SELECT count(*) FROM archived_epochs WHERE agent_id = ? AND purged_at_ms IS NULL",
                (agent_id,),
            )
        )
        records = self._write("DELETE FROM archived_records WHERE agent_id = ?", (agent_id,))
        self._send(
            "UPDATE archived_epochs SET purged_at_ms = ? "
            "WHERE agent_id = ? AND purged_at_ms IS NULL",
            (now_ms(), agent_id),
        )
        return epochs, records
