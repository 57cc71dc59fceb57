"""Where an agent's scoped stores live in the kv table: its areas and their key prefixes.

Every area lies under the agent's own prefix, which re-creating the id wipes. The commit
plans erase areas as their lifetimes end; the tool claims, the owed ending and the hook and
tool contexts name the same areas.
"""

from __future__ import annotations

from agentkeep.persistence.kv_keys import scope_prefix

KV_AREA = "kv"  # the conversation's store: outlives every run
RUN_AREA = "run"  # erased by the settlement transaction
HISTORY_AREA = "history"  # erased when its history leaves the provider view (compaction, reset)
CALL_AREA = "call"  # one scope per tool call, erased with its result
NOTICE_AREA = "notice"  # the ids of the notices hooks injected: never erased (idempotence)


def area_prefix(agent_id: str, area: str, *more: str) -> str:
    return scope_prefix("agent", agent_id, area, *more)


__all__ = ["CALL_AREA", "HISTORY_AREA", "KV_AREA", "NOTICE_AREA", "RUN_AREA", "area_prefix"]
