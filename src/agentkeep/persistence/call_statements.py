"""``tx.calls``: a session's pending tool calls and their result claims, inside one
transaction.

``pending_calls`` holds the calls of the tool batch in flight, each with its committed
result once it has one; ``tool_result_claims`` holds the first result claimed for a call.

Invariants:

- :meth:`CallStatements.claim_result` is one conditional ``INSERT OR IGNORE``: the first
  claim of a call wins, and there is never a claim without its pending call (a claim cascades
  with its call, through ``tool_result_claims``' foreign key).
- The writer's memo (persistence/memo.py states its invariant: every value it returns equals
  what the database holds at that point of the transaction) remembers each session's pending
  calls in (index, internal id) order (``("calls", agent_id)``). Every method here that
  writes ``pending_calls`` forgets them; claims are not remembered (always read from SQL).
"""

from __future__ import annotations

from agentkeep.persistence.codec import decode_call, decode_result, encode
from agentkeep.persistence.executor import TableStatements
from agentkeep.persistence.memo import MISSING
from agentkeep.types import ToolResultMessage
from agentkeep.types.records import PendingToolCall

__all__ = ["CallStatements"]


class CallStatements(TableStatements):
    """A session's pending calls and result claims over the enclosing transaction (see the
    module)."""

    def put(self, agent_id: str, calls: list[PendingToolCall]) -> None:
        """Record a tool batch's calls as pending."""
        self._memo.forget(("calls", agent_id))
        for call in calls:
            self._send(
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

    def pending(self, agent_id: str) -> list[PendingToolCall]:
        """In batch order (by ``index``)."""
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

    def claim_result(self, agent_id: str, internal_id: str, result: ToolResultMessage) -> bool:
        """First-writer-wins result claim for one call; False also when the call is not
        pending (no result without its call)."""
        return (
            self._write(
                "INSERT OR IGNORE INTO tool_result_claims (agent_id, internal_id, result_json) "
                "SELECT ?1, ?2, ?3 WHERE EXISTS (SELECT 1 FROM pending_calls "
                "WHERE agent_id = ?1 AND internal_id = ?2)",
                (agent_id, internal_id, encode(result)),
            )
            == 1
        )

    def result_claim(self, agent_id: str, internal_id: str) -> ToolResultMessage | None:
        """The result claimed for the call, or None."""
        raw = self._one(
            "SELECT result_json FROM tool_result_claims WHERE agent_id = ? AND internal_id = ?",
            (agent_id, internal_id),
        )
        return None if raw is None else decode_result(raw)

    def mark_committed(self, agent_id: str, internal_id: str, result: ToolResultMessage) -> bool:
        """Record a result a tool committed early; False if the call is not pending."""
        self._memo.forget(("calls", agent_id))
        return (
            self._write(
                "UPDATE pending_calls SET committed_json = ? "
                "WHERE agent_id = ? AND internal_id = ?",
                (encode(result), agent_id, internal_id),
            )
            == 1
        )

    def remove(self, agent_id: str, internal_id: str) -> bool:
        """Delete the pending entry and its result claim; False if it was already gone."""
        # The claim cascades with the call (tool_result_claims' foreign key).
        self._memo.forget(("calls", agent_id))
        return (
            self._write(
                "DELETE FROM pending_calls WHERE agent_id = ? AND internal_id = ?",
                (agent_id, internal_id),
            )
            == 1
        )
