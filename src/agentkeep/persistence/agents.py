"""``tx.agents``: the ``agents`` table (the identity index), inside one transaction.

Invariants:

- At most one live (not deleted) agent holds an id; :meth:`AgentStatements.create` claims it
  and re-creating a deleted id wipes everything the previous agent stored: the ``agents``
  cascade takes its records, queues, calls and facts, and its kv rows (under its prefix) go
  with a range delete in the same transaction.
- Deleting keeps what the agent wrote (its ledger stays readable); its children become roots.
- The writer's memo remembers live rows (``("agent", id)``); every write here forgets what it
  changes, and a re-create forgets the whole agent (persistence/memo.py).
"""

from __future__ import annotations

from agentkeep.errors import UnknownAgentError
from agentkeep.persistence.codec import agent_row, decode_object, encode, now_ms
from agentkeep.persistence.executor import Executor, TableStatements, first
from agentkeep.persistence.kv_keys import agent_prefix
from agentkeep.persistence.kv_statements import KvStatements
from agentkeep.persistence.memo import MISSING
from agentkeep.types import JSONObject
from agentkeep.types.records import AgentRow

__all__ = ["AgentStatements"]

_COLUMNS = "id, config_json, metadata_json, parent_id, created_at_ms"


class AgentStatements(TableStatements):
    """The agents' identity rows over the enclosing transaction (see the module)."""

    def __init__(self, executor: Executor, kv: KvStatements) -> None:
        super().__init__(executor)
        self._kv = kv

    def create(self, row: AgentRow, *, partition: int = 0) -> bool:
        """Claim ``row.id``; False if a live agent holds it. Re-creating a deleted id wipes
        everything the previous agent stored (records, queues, calls, facts, its kv).
        ``partition`` is stored as ``agents.partition`` (``agentkeep.partitions``)."""
        self._check(write=True)
        live = first(self._read("SELECT deleted_at_ms IS NULL FROM agents WHERE id = ?", (row.id,)))
        if live is not None and live[0]:
            return False
        # Cascades wipe the previous agent's records, queues, calls and facts; its kv rows
        # live under its prefix and go with a range delete.
        self._send("DELETE FROM agents WHERE id = ?", (row.id,))
        # The cascade wiped everything the previous life stored: forget all of it.
        self._memo.forget_agent(row.id)
        self._kv.clear(agent_prefix(row.id))
        values = (
            row.id,
            encode(row.config),
            encode(row.metadata),
            row.parent_id,
            row.created_at_ms or now_ms(),
        )
        if partition:  # 0 is the column's default: the classic statement
            self._send(
                f"INSERT INTO agents ({_COLUMNS}, partition) VALUES (?, ?, ?, ?, ?, ?)",
                (*values, partition),
            )
        else:
            self._send(f"INSERT INTO agents ({_COLUMNS}) VALUES (?, ?, ?, ?, ?)", values)
        return True

    def get(self, agent_id: str) -> AgentRow | None:
        """The live (not deleted) agent row, or None."""
        # create, delete and update_metadata forget what they change.
        key = ("agent", agent_id)
        known: AgentRow | None = self._memo_get(key)
        if known is not MISSING:
            return known
        cursor = self._read(
            f"SELECT {_COLUMNS} FROM agents WHERE id = ? AND deleted_at_ms IS NULL", (agent_id,)
        )
        row = first(cursor)
        found = None if row is None else agent_row(row)
        self._memo.put(key, found)
        return found

    def live(self) -> list[AgentRow]:
        """Every live agent, oldest first."""
        cursor = self._read(
            f"SELECT {_COLUMNS} FROM agents WHERE deleted_at_ms IS NULL ORDER BY created_at_ms, id"
        )
        return [agent_row(row) for row in cursor]

    def delete(self, agent_id: str) -> bool:
        """Mark deleted (releasing the id); keeps what it wrote. Children become roots."""
        # Its children's rows change too (parent_id): forget every remembered agents row.
        self._memo.forget_kind("agent")
        deleted = self._write(
            "UPDATE agents SET deleted_at_ms = ? WHERE id = ? AND deleted_at_ms IS NULL",
            (now_ms(), agent_id),
        )
        if deleted:
            self._send("UPDATE agents SET parent_id = NULL WHERE parent_id = ?", (agent_id,))
        return deleted == 1

    def update_metadata(self, agent_id: str, patch: JSONObject) -> JSONObject:
        """Shallow-merge ``patch`` into the metadata; returns the merged metadata."""
        raw = self._one(
            "SELECT metadata_json FROM agents WHERE id = ? AND deleted_at_ms IS NULL",
            (agent_id,),
        )
        if raw is None:
            raise UnknownAgentError(agent_id)
        merged = {**decode_object(raw), **patch}
        self._memo.forget(("agent", agent_id))
        self._send("UPDATE agents SET metadata_json = ? WHERE id = ?", (encode(merged), agent_id))
        return merged

    def children_of(self, agent_id: str) -> list[str]:
        """The live children's ids, in id order."""
        cursor = self._read(
            "SELECT id FROM agents WHERE parent_id = ? AND deleted_at_ms IS NULL ORDER BY id",
            (agent_id,),
        )
        return [str(row[0]) for row in cursor]
