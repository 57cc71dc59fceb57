"""A tool call's early result commit (``ctx.commit``, and a transactional tool's
automatic commit): the result is claimed for its pending call before the batch gets to it.

The claim is the durable fact: the batch's own result transaction (``CommitToolResult``)
appends whichever result was claimed first, in batch order, and a restarted batch reuses a
claimed result instead of running the call again (``PendingToolCall.committed``).
"""

from __future__ import annotations

from agentkeep.persistence.interface import Transaction
from agentkeep.runtime.kv_areas import CALL_AREA, area_prefix
from agentkeep.types import ToolResultMessage

# The tool-call hooks' own call stores live under the call's scope, in its nested
# ``feature`` scope; they stay until the batch's result transaction (its
# ``after_tool_call_transact`` still reads them), so a claim erases only the tool's part.
_FEATURE_SCOPE = "feature."


def claim_result(
    tx: Transaction, agent_id: str, internal_id: str, result: ToolResultMessage
) -> bool:
    """Claim ``result`` for the pending call ``internal_id``, in ``tx``: first claim wins.

    On a win the call is marked committed (a restart does not run it again) and the tool's
    call store is erased, all in ``tx``. False, with nothing written, if a result was
    claimed already or the call is no longer pending (answered, or never dispatched).
    """
    if not tx.calls.claim_result(agent_id, internal_id, result):
        return False
    if not tx.calls.mark_committed(agent_id, internal_id, result):  # pragma: no cover
        raise LookupError(f"tool call {internal_id!r} lost its pending entry inside a claim")
    prefix = area_prefix(agent_id, CALL_AREA, internal_id)
    for raw, _ in tx.kv.scan(prefix):
        if not raw[len(prefix) :].startswith(_FEATURE_SCOPE):
            tx.kv.delete(raw)
    return True
