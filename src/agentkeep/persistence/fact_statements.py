"""``tx.facts``: a session's single-row facts, inside one transaction.

Each table holds at most one row per session: its settings (``settings``), the work it owes
(``owed_work``: what a restart must resume) and its context size in tokens
(``context_tokens``).

Invariants:

- :meth:`FactStatements.claim_owed` is one ``INSERT OR IGNORE``: the first claim wins, and a
  claim never overwrites owed work already recorded.
- The writer's memo (persistence/memo.py states its invariant: every value it returns equals
  what the database holds at that point of the transaction) remembers each fact per session
  as stored: the settings' and owed work's JSON text (``("settings", agent_id)``,
  ``("owed", agent_id)``; None: no row) and the token count (``("tokens", agent_id)``).
  Besides the ``agents`` cascade and raw SQL (which the memo accounts for as a whole), only
  the methods here write these tables: each forgets its fact before its statement and records
  what the row holds once the statement ran (an ignored claim puts back what was known).
"""

from __future__ import annotations

from agentkeep.persistence.codec import decode_owed, decode_settings, encode
from agentkeep.persistence.executor import TableStatements
from agentkeep.persistence.memo import MISSING
from agentkeep.types import Settings
from agentkeep.types.records import OwedWork

__all__ = ["FactStatements"]


class FactStatements(TableStatements):
    """A session's settings, owed work and context tokens over the enclosing transaction (see
    the module)."""

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
        self._send(
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
        """Upsert; an identical value is not rewritten."""
        # The WHERE skips the write when the stored value is identical (canonical JSON).
        key, text = ("owed", agent_id), encode(owed)
        self._memo.forget(key)
        self._send(
            "INSERT INTO owed_work (agent_id, owed_json) VALUES (?, ?) "
            "ON CONFLICT (agent_id) DO UPDATE SET owed_json = excluded.owed_json "
            "WHERE owed_work.owed_json IS NOT excluded.owed_json",
            (agent_id, text),
        )
        self._memo.put(key, text)

    def claim_owed(self, agent_id: str, owed: OwedWork) -> bool:
        """Insert-if-absent: True if this write created the fact (the agent was settled)."""
        key, text = ("owed", agent_id), encode(owed)
        before = self._memo.get(key)
        self._memo.forget(key)
        sql = "INSERT OR IGNORE INTO owed_work (agent_id, owed_json) VALUES (?, ?)"
        if before is None and self._x.statements.sends:
            # Known to be absent: the INSERT creates it; sent without waiting for its count.
            self._send(sql, (agent_id, text))
            claimed = True
        else:
            claimed = self._write(sql, (agent_id, text)) == 1
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

    def drop_owed(self, agent_id: str) -> None:
        """:meth:`delete_owed` without its answer: a backend sends it without waiting."""
        key = ("owed", agent_id)
        self._memo.forget(key)
        self._send("DELETE FROM owed_work WHERE agent_id = ?", (agent_id,))
        self._memo.put(key, None)

    def agents_owing_work(self, partition: int | None = None) -> list[str]:
        """Ids of live agents with an owed-work fact (an index scan); given ``partition``,
        only that partition's (``agents.partition``)."""
        if partition is None:
            cursor = self._read(
                "SELECT o.agent_id FROM owed_work AS o JOIN agents AS a ON a.id = o.agent_id "
                "WHERE a.deleted_at_ms IS NULL ORDER BY o.agent_id"
            )
        else:
            cursor = self._read(
                "SELECT o.agent_id FROM owed_work AS o JOIN agents AS a ON a.id = o.agent_id "
                "WHERE a.deleted_at_ms IS NULL AND a.partition = ? ORDER BY o.agent_id",
                (partition,),
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
            self._send("DELETE FROM context_tokens WHERE agent_id = ?", (agent_id,))
        else:
            self._send(
                "INSERT INTO context_tokens (agent_id, tokens) VALUES (?, ?) "
                "ON CONFLICT (agent_id) DO UPDATE SET tokens = excluded.tokens",
                (agent_id, tokens),
            )
        self._memo.put(key, tokens)
