"""Schema migration 7's statements: the per-step tables re-stored so a commit dirties fewer
pages. Kept apart from :mod:`agentkeep.persistence.schema`, which lists it."""

from __future__ import annotations

# Fewer pages per commit: measured with the WAL frames each commit appends, mapped
# to their b-trees through dbstat. A rowid table with a TEXT or composite primary key is two
# b-trees (the rows, and the key's index), so an insert or delete dirties a page in each.
# The small or short-lived rows written on every step (owed work, queued messages, notices,
# pending tool calls, the context-token count) move to WITHOUT ROWID tables: one b-tree each.
# The ledger goes the other way: an append-only table of rows up to a few KB is cheaper as a
# rowid table (SQLite appends to a rowid b-tree without rebalancing its neighbours and keeps
# rows up to ~4 KB on the leaf, while a WITHOUT ROWID b-tree re-balances three siblings on
# most appends and spills rows past ~1 KB to overflow pages). Records, turns and turn inputs
# stay as they are (measured: as WITHOUT ROWID they dirty more pages once rows pass ~1 KB;
# turn inputs are read in rowid order).
#
# Each table is rebuilt the same way, inside the migration's one transaction with foreign
# keys on: rename the old table away, create the new one with the exact definition it had
# (every column, CHECK, foreign key and ON DELETE action; only the storage changes), copy
# every row, drop the old table, then re-create its indexes and triggers (their names move
# with the renamed table, so they can only be re-created once it is gone). A renamed parent
# takes its children's foreign keys with it, so tool_result_claims (the child of
# pending_calls) is renamed first and rebuilt after its parent; nothing references the other
# rebuilt tables. Dropping a table with foreign keys on deletes its rows first, cascading to
# children: each old table is dropped only after the child that pointed at it.
#
# One difference is not storage: a WITHOUT ROWID table's key columns are NOT NULL, while a
# rowid table's lone TEXT PRIMARY KEY admitted NULL. No statement ever wrote a NULL agent_id
# (every one binds the agent's id) and no query could reach such a row (all look up by
# agent_id, or join agents), so the copy leaves any out rather than fail the upgrade.
FEWER_PAGES = """
ALTER TABLE owed_work RENAME TO owed_work_v6;
CREATE TABLE owed_work (
    agent_id TEXT PRIMARY KEY REFERENCES agents(id) ON DELETE CASCADE,
    owed_json TEXT NOT NULL
) WITHOUT ROWID;
INSERT INTO owed_work (agent_id, owed_json)
    SELECT agent_id, owed_json FROM owed_work_v6 WHERE agent_id IS NOT NULL;
DROP TABLE owed_work_v6;

ALTER TABLE context_tokens RENAME TO context_tokens_v6;
CREATE TABLE context_tokens (
    agent_id TEXT PRIMARY KEY REFERENCES agents(id) ON DELETE CASCADE,
    tokens INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO context_tokens (agent_id, tokens)
    SELECT agent_id, tokens FROM context_tokens_v6 WHERE agent_id IS NOT NULL;
DROP TABLE context_tokens_v6;

ALTER TABLE queue RENAME TO queue_v6;
CREATE TABLE queue (
    agent_id TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    queue TEXT NOT NULL CHECK (queue IN ('steering', 'send')),
    seq INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    envelope_json TEXT NOT NULL,
    PRIMARY KEY (agent_id, queue, seq)
) WITHOUT ROWID;
INSERT INTO queue (agent_id, queue, seq, message_id, envelope_json)
    SELECT agent_id, queue, seq, message_id, envelope_json FROM queue_v6;
DROP TABLE queue_v6;

ALTER TABLE notices RENAME TO notices_v6;
CREATE TABLE notices (
    agent_id TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    notice_json TEXT NOT NULL,
    PRIMARY KEY (agent_id, seq)
) WITHOUT ROWID;
INSERT INTO notices (agent_id, seq, notice_json) SELECT agent_id, seq, notice_json FROM notices_v6;
DROP TABLE notices_v6;

ALTER TABLE tool_result_claims RENAME TO tool_result_claims_v6;
ALTER TABLE pending_calls RENAME TO pending_calls_v6;
CREATE TABLE pending_calls (
    agent_id TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    internal_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    call_json TEXT NOT NULL,
    committed_json TEXT,
    PRIMARY KEY (agent_id, internal_id)
) WITHOUT ROWID;
INSERT INTO pending_calls (agent_id, internal_id, idx, call_json, committed_json)
    SELECT agent_id, internal_id, idx, call_json, committed_json FROM pending_calls_v6;
-- A claim exists only for a pending call (no result without its call), and goes with it.
CREATE TABLE tool_result_claims (
    agent_id TEXT NOT NULL,
    internal_id TEXT NOT NULL,
    result_json TEXT NOT NULL,
    PRIMARY KEY (agent_id, internal_id),
    FOREIGN KEY (agent_id, internal_id)
        REFERENCES pending_calls(agent_id, internal_id) ON DELETE CASCADE
) WITHOUT ROWID;
INSERT INTO tool_result_claims (agent_id, internal_id, result_json)
    SELECT agent_id, internal_id, result_json FROM tool_result_claims_v6;
DROP TABLE tool_result_claims_v6;
DROP TABLE pending_calls_v6;
CREATE INDEX pending_calls_in_order ON pending_calls(agent_id, idx);

ALTER TABLE session_events RENAME TO session_events_v6;
CREATE TABLE session_events (
    agent_id TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    sequence INTEGER NOT NULL CHECK (sequence >= 1),
    type TEXT NOT NULL,
    turn_id TEXT,
    data_json TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (agent_id, sequence)
);
INSERT INTO session_events (agent_id, sequence, type, turn_id, data_json, created_at_ms)
    SELECT agent_id, sequence, type, turn_id, data_json, created_at_ms FROM session_events_v6
    ORDER BY agent_id, sequence;
DROP TABLE session_events_v6;

CREATE TRIGGER session_events_are_immutable BEFORE UPDATE ON session_events
BEGIN
    SELECT RAISE(ABORT, 'session events are immutable');
END;

CREATE TRIGGER session_events_are_never_deleted BEFORE DELETE ON session_events
WHEN EXISTS (SELECT 1 FROM agents WHERE id = OLD.agent_id)
BEGIN
    SELECT RAISE(ABORT, 'session events are never deleted');
END;
"""
