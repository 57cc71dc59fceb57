"""The history KV: an agent's store that belongs to its current conversation history.

It lives in the agent's ``history`` area (:mod:`.kv_areas`) and is erased, in the same
transaction, whenever that history leaves the provider's view: a committed compaction
replaces it, an incompatible model switch or a profile change resets it
(:mod:`.commit_plans`). A crash anywhere in between leaves both or neither.

Old handles expire by a **durable generation**: a counter beside the area (at
``agent.<A>.history-generation``, outside the area so erasing the area keeps it), bumped by
every erasure in the erasing transaction. A handle remembers the generation current when it
was made and, inside each operation's own transaction, checks it is still the durable one
(``ScopedKV.checked``) — else :class:`~agentkeep.errors.ExpiredScopeError`. A generation in
the key prefix alone would not do: a retained handle would then keep reading and writing
orphaned keys of the old history instead of failing, and those keys would outlive it.
"""

from __future__ import annotations

from agentkeep.persistence.interface import StoreHandle, Transaction
from agentkeep.persistence.kv import ScopedKV
from agentkeep.persistence.kv_keys import agent_prefix, escape_segment
from agentkeep.runtime.kv_areas import HISTORY_AREA, area_prefix

_GENERATION = "history-generation"


def _generation_key(agent_id: str) -> str:
    # A key directly under the agent's prefix: no area's ``<name>.`` prefix covers it.
    return agent_prefix(agent_id) + escape_segment(_GENERATION)


def history_generation(tx: Transaction, agent_id: str) -> int:
    """The agent's current history generation (0 before its first erasure)."""
    value = tx.kv.read(_generation_key(agent_id))
    return int(value) if value is not None else 0


def erase_history_kv(tx: Transaction, agent_id: str) -> int:
    """Erase the agent's history KV inside ``tx`` and start its next generation (every
    handle made before expires once ``tx`` commits); returns the new generation."""
    tx.kv.drop(area_prefix(agent_id, HISTORY_AREA))
    generation = history_generation(tx, agent_id) + 1
    tx.kv.write(_generation_key(agent_id), generation)
    return generation


def history_kv(
    agent_id: str,
    *segments: str,
    tx: Transaction | None = None,
    store: StoreHandle | None = None,
) -> ScopedKV:
    """A handle on ``segments`` of the agent's history KV, bound to the generation current
    now: inside ``tx`` (it joins that transaction) or through ``store`` (each operation its
    own transaction). It raises ``ExpiredScopeError`` once that history was erased.
    """
    prefix = ("agent", agent_id, HISTORY_AREA, *segments)
    if tx is not None:
        generation = history_generation(tx, agent_id)
        scope = ScopedKV.in_transaction(tx, *prefix)
    elif store is not None:
        generation = store.read(lambda read: history_generation(read, agent_id))
        scope = ScopedKV.through(store, *prefix)
    else:
        raise ValueError("history_kv needs a transaction or a store")
    return scope.checked(lambda current: history_generation(current, agent_id) == generation)


__all__ = ["erase_history_kv", "history_generation", "history_kv"]
