"""A session's pending tool calls and their result claims: their statements, a mixin of
:class:`~agentkeep.persistence.transaction.SqliteTransaction` (like ``TurnStatements``).

``pending_calls`` holds the calls of the tool batch in flight, each with its committed
result once it has one; ``tool_result_claims`` holds the first result claimed for a call.

Invariants:

- :meth:`CallStatements.claim_tool_result` is one conditional ``INSERT OR IGNORE``: the first
  claim of a call wins, and there is never a claim without its pending call (a claim cascades
  with its call, through ``tool_result_claims``' foreign key).
- The writer's memo (persistence/memo.py states its invariant: every value it returns equals
  what the database holds at that point of the transaction) remembers each session's pending
  calls in (index, internal id) order (``("calls", agent_id)``). Every method here that
  writes ``pending_calls`` forgets them; claims are not remembered (always read from SQL).
"""

from __future__ import annotations

from agentkeep.persistence.codec import decode_call, decode_result, encode
from agentkeep.persistence.memo import MISSING
from agentkeep.persistence.transaction_core import TransactionCore
from agentkeep.types import PendingToolCall, ToolResultMessage


class CallStatements(TransactionCore):
    """A session's pending calls and result claims over the enclosing transaction (see the
    module)."""

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
