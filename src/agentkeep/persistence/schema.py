"""Schema migrations: an append-only list, each applied atomically with its marker row.

Rules this module keeps:

- :data:`MIGRATIONS` only ever grows at the end. A released migration is never edited or
  reordered; a change to the schema is a new migration.
- Each migration runs in its own ``BEGIN IMMEDIATE`` transaction together with the
  ``schema_migrations`` row that marks it applied, so a crash leaves it wholly applied or not
  at all.
- The applied markers must be a prefix of :data:`MIGRATIONS` (same versions, same names); a
  database that has a version this code does not know is refused with
  :class:`~agentkeep.errors.SchemaTooNewError` before anything is written.
"""

from __future__ import annotations

import apsw
import msgspec

from agentkeep.errors import SchemaTooNewError, StoreError
from agentkeep.logs import get_logger
from agentkeep.persistence import clock
from agentkeep.persistence.schema_storage import FEWER_PAGES

log = get_logger(__name__)


class Migration(msgspec.Struct, frozen=True, kw_only=True):
    """One numbered schema change."""

    version: int
    name: str
    sql: str


_INITIAL = """
CREATE TABLE agents (
    id TEXT PRIMARY KEY,
    config_json TEXT NOT NULL,
    metadata_json TEXT NOT NULL,
    -- A deleted parent's children become roots, so the link never dangles.
    parent_id TEXT REFERENCES agents(id) ON DELETE SET NULL,
    created_at_ms INTEGER NOT NULL,
    deleted_at_ms INTEGER
);
CREATE INDEX agents_by_parent ON agents(parent_id) WHERE parent_id IS NOT NULL;

-- Every per-agent table cascades from agents: re-creating a deleted id deletes the old
-- agents row, which wipes everything the previous agent stored in one statement.
CREATE TABLE records (
    agent_id TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    record_json TEXT NOT NULL,
    PRIMARY KEY (agent_id, position)
);

CREATE TABLE message_ids (
    agent_id TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    message_id TEXT NOT NULL,
    PRIMARY KEY (agent_id, message_id)
) WITHOUT ROWID;

-- The highest seq ever handed out per (agent, queue), so a seq is never reused even after
-- the tail entry was consumed: (queue, seq) names one message for its whole life.
CREATE TABLE queue_tails (
    agent_id TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    queue TEXT NOT NULL,
    last_seq INTEGER NOT NULL,
    PRIMARY KEY (agent_id, queue)
) WITHOUT ROWID;

CREATE TABLE queue (
    agent_id TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    queue TEXT NOT NULL CHECK (queue IN ('steering', 'send')),
    seq INTEGER NOT NULL,
    message_id TEXT NOT NULL,
    envelope_json TEXT NOT NULL,
    PRIMARY KEY (agent_id, queue, seq)
);

CREATE TABLE notices (
    agent_id TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    notice_json TEXT NOT NULL,
    PRIMARY KEY (agent_id, seq)
);

CREATE TABLE pending_calls (
    agent_id TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    internal_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    call_json TEXT NOT NULL,
    committed_json TEXT,
    PRIMARY KEY (agent_id, internal_id)
);
CREATE INDEX pending_calls_in_order ON pending_calls(agent_id, idx);

-- A claim exists only for a pending call (no result without its call), and goes with it.
CREATE TABLE tool_result_claims (
    agent_id TEXT NOT NULL,
    internal_id TEXT NOT NULL,
    result_json TEXT NOT NULL,
    PRIMARY KEY (agent_id, internal_id),
    FOREIGN KEY (agent_id, internal_id)
        REFERENCES pending_calls(agent_id, internal_id) ON DELETE CASCADE
);

CREATE TABLE settings (
    agent_id TEXT PRIMARY KEY REFERENCES agents(id) ON DELETE CASCADE,
    settings_json TEXT NOT NULL
);

-- Holds a row only while the agent owes work, so agents_owing_work scans just those rows.
CREATE TABLE owed_work (
    agent_id TEXT PRIMARY KEY REFERENCES agents(id) ON DELETE CASCADE,
    owed_json TEXT NOT NULL
);

CREATE TABLE context_tokens (
    agent_id TEXT PRIMARY KEY REFERENCES agents(id) ON DELETE CASCADE,
    tokens INTEGER NOT NULL
);

-- The sorted key-value table behind every scoped store; keys are escaped scope paths.
CREATE TABLE kv (
    key TEXT PRIMARY KEY,
    value_json TEXT NOT NULL
) WITHOUT ROWID;
"""

# The registry of versioned definitions (the wire's agents; see agentkeep.registry). An
# identity row is never deleted (a delete sets deleted_at_ms: ids stay reserved) and a revision
# is never changed or deleted; triggers refuse both, so no code path can rewrite history. The
# current pointer may only move to a revision of the same definition that exists.
_DEFINITION_REGISTRY = """
CREATE TABLE definitions (
    id TEXT PRIMARY KEY,
    current_revision INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    deleted_at_ms INTEGER
) WITHOUT ROWID;

CREATE TABLE definition_revisions (
    id TEXT PRIMARY KEY,
    definition_id TEXT NOT NULL REFERENCES definitions(id),
    number INTEGER NOT NULL CHECK (number >= 1),
    hash TEXT NOT NULL,
    definition_json TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    UNIQUE (definition_id, number)
);

CREATE TRIGGER definitions_are_never_deleted BEFORE DELETE ON definitions
BEGIN
    SELECT RAISE(ABORT, 'definition identities are never deleted (ids stay reserved)');
END;

CREATE TRIGGER definition_revisions_are_immutable BEFORE UPDATE ON definition_revisions
BEGIN
    SELECT RAISE(ABORT, 'definition revisions are immutable');
END;

CREATE TRIGGER definition_revisions_are_never_deleted BEFORE DELETE ON definition_revisions
BEGIN
    SELECT RAISE(ABORT, 'definition revisions are never deleted');
END;

CREATE TRIGGER definitions_point_at_their_revisions
BEFORE UPDATE OF current_revision ON definitions
WHEN NOT EXISTS (
    SELECT 1 FROM definition_revisions
    WHERE definition_id = NEW.id AND number = NEW.current_revision
)
BEGIN
    SELECT RAISE(ABORT, 'a definition must point at one of its own revisions');
END;
"""

# Archived history: what a model switch or a compaction took out of the provider's
# view stays readable here until an explicit purge. One ``archived_epochs`` row per archived
# stretch of history; a purge deletes its records but keeps the row (``purged_at_ms``), so
# epoch numbers are never reused. Both cascade from agents like every per-agent table.
_ARCHIVED_HISTORY = """
CREATE TABLE archived_epochs (
    agent_id TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    epoch INTEGER NOT NULL,
    reason TEXT NOT NULL CHECK (reason IN ('model_switch', 'compaction')),
    settings_json TEXT,
    archived_at_ms INTEGER NOT NULL,
    purged_at_ms INTEGER,
    PRIMARY KEY (agent_id, epoch)
);

CREATE TABLE archived_records (
    agent_id TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    position INTEGER NOT NULL,
    record_json TEXT NOT NULL,
    PRIMARY KEY (agent_id, epoch, position),
    FOREIGN KEY (agent_id, epoch)
        REFERENCES archived_epochs(agent_id, epoch) ON DELETE CASCADE
);
"""

# Sessions (see agentkeep.sessions): one row per agent started from a
# definition (its pin) or whose session record changed (archived, a driver session id); an
# agent without a row is an active session without a definition. The pin is written with the
# agent and never changes (a trigger refuses it), and it must name a revision of its own
# definition with that revision's number. The row cascades from agents like every per-agent
# table; definitions and revisions are never deleted, so a pin never dangles.
_SESSIONS = """
CREATE TABLE sessions (
    agent_id TEXT PRIMARY KEY REFERENCES agents(id) ON DELETE CASCADE,
    definition_id TEXT REFERENCES definitions(id),
    revision_id TEXT REFERENCES definition_revisions(id),
    revision_number INTEGER,
    driver_session_id TEXT,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    archived_at_ms INTEGER,
    CHECK ((definition_id IS NULL) = (revision_id IS NULL)
       AND (revision_id IS NULL) = (revision_number IS NULL))
);
CREATE INDEX sessions_by_definition ON sessions(definition_id, agent_id)
    WHERE definition_id IS NOT NULL;

CREATE TRIGGER session_pins_are_immutable
BEFORE UPDATE OF definition_id, revision_id, revision_number ON sessions
WHEN NEW.definition_id IS NOT OLD.definition_id OR NEW.revision_id IS NOT OLD.revision_id
    OR NEW.revision_number IS NOT OLD.revision_number
BEGIN
    SELECT RAISE(ABORT, 'a session stays pinned to the revision it started from');
END;

CREATE TRIGGER session_pins_name_their_revision
BEFORE INSERT ON sessions
WHEN NEW.revision_id IS NOT NULL AND NOT EXISTS (
    SELECT 1 FROM definition_revisions
    WHERE id = NEW.revision_id AND definition_id = NEW.definition_id
        AND number = NEW.revision_number
)
BEGIN
    SELECT RAISE(ABORT, 'a session must pin a revision of its own definition');
END;
"""

# The session event ledger (docs/ledger.md): one row per committed fact, dense per
# session from 1. Append-only: no statement may change or delete an event; the only deletion
# is the cascade from ``agents`` when a soft-deleted id is re-created (which wipes everything
# the previous agent stored, its ledger included). A soft delete keeps the ledger readable,
# like the transcript. The DELETE trigger therefore lets a row go only once its agents row is
# gone (a cascade), and refuses every other delete; UPDATE is always refused.
_SESSION_EVENTS = """
CREATE TABLE session_events (
    agent_id TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    sequence INTEGER NOT NULL CHECK (sequence >= 1),
    type TEXT NOT NULL,
    turn_id TEXT,
    data_json TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (agent_id, sequence)
) WITHOUT ROWID;

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

# Turns (docs/turns.md): one row per turn, and one row per accepted input that
# belongs to a turn (a send's opens it, a steer's joins it). An idempotency key is unique per
# session and never released: neither table is ever pruned (compaction and model resets touch
# neither). A terminal status never changes; a turn's identity and input never change; rows go
# only with their agent (the cascade when a soft-deleted id is re-created).
_TURNS = """
CREATE TABLE turns (
    agent_id TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    number INTEGER NOT NULL CHECK (number >= 1),
    id TEXT NOT NULL UNIQUE,
    idempotency_key TEXT NOT NULL,
    driver TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('queued', 'running', 'cancelling', 'completed',
        'failed', 'cancelled', 'interrupted')),
    input_json TEXT NOT NULL,
    message_id TEXT,
    result_json TEXT,
    error_json TEXT,
    created_at_ms INTEGER NOT NULL,
    started_at_ms INTEGER,
    completed_at_ms INTEGER,
    PRIMARY KEY (agent_id, number),
    UNIQUE (agent_id, idempotency_key)
);

CREATE INDEX turns_live ON turns (agent_id, number)
WHERE status IN ('queued', 'running', 'cancelling');

CREATE TABLE turn_inputs (
    agent_id TEXT NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    idempotency_key TEXT NOT NULL,
    turn_id TEXT NOT NULL REFERENCES turns(id) ON DELETE CASCADE,
    delivery TEXT NOT NULL CHECK (delivery IN ('send', 'steer')),
    input_hash TEXT NOT NULL,
    message_id TEXT,
    PRIMARY KEY (agent_id, idempotency_key)
);

CREATE INDEX turn_inputs_by_message ON turn_inputs (agent_id, message_id);
CREATE INDEX turn_inputs_by_turn ON turn_inputs (turn_id);

CREATE TRIGGER turn_terminal_status_is_final BEFORE UPDATE OF status ON turns
WHEN OLD.status IN ('completed', 'failed', 'cancelled', 'interrupted')
    AND NEW.status IS NOT OLD.status
BEGIN
    SELECT RAISE(ABORT, 'a terminal turn status never changes');
END;

CREATE TRIGGER turn_identity_is_immutable BEFORE UPDATE ON turns
WHEN NEW.id IS NOT OLD.id OR NEW.agent_id IS NOT OLD.agent_id OR NEW.number IS NOT OLD.number
    OR NEW.idempotency_key IS NOT OLD.idempotency_key OR NEW.input_json IS NOT OLD.input_json
    OR NEW.driver IS NOT OLD.driver
BEGIN
    SELECT RAISE(ABORT, 'a turn keeps its id, number, key, driver and input');
END;

CREATE TRIGGER turns_are_never_deleted BEFORE DELETE ON turns
WHEN EXISTS (SELECT 1 FROM agents WHERE id = OLD.agent_id)
BEGIN
    SELECT RAISE(ABORT, 'turns are never deleted');
END;

CREATE TRIGGER turn_inputs_are_immutable BEFORE UPDATE ON turn_inputs
BEGIN
    SELECT RAISE(ABORT, 'turn inputs are immutable');
END;

CREATE TRIGGER turn_inputs_are_never_deleted BEFORE DELETE ON turn_inputs
WHEN EXISTS (SELECT 1 FROM agents WHERE id = OLD.agent_id)
BEGIN
    SELECT RAISE(ABORT, 'idempotency keys are never released');
END;
"""


# The keys of the modules' own migrations (``agentkeep.modules``) applied to this store: a
# row is written in the very transaction that runs its migration, so a key is recorded
# exactly when the migration's writes are durable, and never run again once recorded.
_MODULE_MIGRATIONS = """
CREATE TABLE module_migrations (
    module TEXT NOT NULL,
    key TEXT NOT NULL,
    applied_at_ms INTEGER NOT NULL,
    PRIMARY KEY (module, key)
) WITHOUT ROWID;
"""

# The W3C trace context (``traceparent``) a turn was accepted under (docs/observability.md):
# its spans are children of it, in this process and in the one that resumes it after a
# restart. NULL when tracing was off or the sender sent none.
_TURN_TRACE_PARENT = """
ALTER TABLE turns ADD COLUMN trace_parent TEXT;
"""

# The partition of each agent (agentkeep.partitions): on PostgreSQL a store may be divided
# into partitions, each run by one system, which restores, resumes and recovers only its own
# partition's agents (filtering on this column). Filled when the agent is created; 0 in a
# store that was never partitioned (SQLite's always).
_AGENT_PARTITION = """
ALTER TABLE agents ADD COLUMN partition INTEGER NOT NULL DEFAULT 0;
CREATE INDEX agents_by_partition ON agents(partition) WHERE deleted_at_ms IS NULL;
"""

#: Append-only. Never edit or reorder a released entry; add a new one.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(version=1, name="initial_schema", sql=_INITIAL),
    Migration(version=2, name="definition_registry", sql=_DEFINITION_REGISTRY),
    Migration(version=3, name="archived_history", sql=_ARCHIVED_HISTORY),
    Migration(version=4, name="sessions", sql=_SESSIONS),
    Migration(version=5, name="session_events", sql=_SESSION_EVENTS),
    Migration(version=6, name="turns", sql=_TURNS),
    Migration(version=7, name="fewer_pages_per_commit", sql=FEWER_PAGES),
    Migration(version=8, name="module_migrations", sql=_MODULE_MIGRATIONS),
    Migration(version=9, name="turn_trace_parent", sql=_TURN_TRACE_PARENT),
    Migration(version=10, name="agent_partition", sql=_AGENT_PARTITION),
)

SCHEMA_VERSION = MIGRATIONS[-1].version

_MARKER_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at_ms INTEGER NOT NULL
)
"""


#: The page size a new database is created with. A commit appends every page it
#: dirtied to the WAL whole, and its fsync's cost grows with those bytes: a step dirties about
#: the same number of b-tree pages whatever their size, so 2 KB pages write ~60 KB per step
#: where 4 KB pages wrote ~110 KB (measured: each commit ~40-100 µs cheaper), while rows up
#: to ~2 KB still sit on their leaf. An existing database keeps the size it was created with
#: (changing it needs a VACUUM); every size works.
PAGE_SIZE = 2048


def set_new_page_size(connection: apsw.Connection) -> None:
    """Give a database that has no pages yet :data:`PAGE_SIZE` (a no-op on one that has).

    Call it before anything writes the file: setting ``journal_mode = WAL`` writes the first
    page, which fixes the page size.
    """
    connection.execute(f"PRAGMA page_size = {PAGE_SIZE}")


def applied_migrations(connection: apsw.Connection) -> list[tuple[int, str]]:
    """``(version, name)`` of every applied migration, in order (empty on a new database)."""
    exists = connection.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
    ).fetchone()
    if exists is None:
        return []
    return [
        (int(version), str(name))
        for version, name in connection.execute(
            "SELECT version, name FROM schema_migrations ORDER BY version"
        )
    ]


def migrate(
    connection: apsw.Connection, migrations: tuple[Migration, ...] = MIGRATIONS
) -> list[int]:
    """Apply every migration the database lacks; returns the versions applied now.

    Args:
        connection: The writer's connection, outside any transaction.
        migrations: The code's migration list (a parameter so tests can extend it).

    Raises:
        SchemaTooNewError: the database has migrations this code does not know.
        StoreError: the applied migrations are not a prefix of ``migrations``.
    """
    _check_known(connection, migrations)
    applied_now: list[int] = []
    for migration in migrations:
        connection.execute("BEGIN IMMEDIATE")
        try:
            connection.execute(_MARKER_TABLE)
            # Re-checked inside the write lock: the marker decides, never a stale read.
            done = connection.execute(
                "SELECT 1 FROM schema_migrations WHERE version = ?", (migration.version,)
            ).fetchone()
            if done is None:
                connection.execute(migration.sql)
                connection.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at_ms) VALUES (?, ?, ?)",
                    (migration.version, migration.name, clock.now_ms()),
                )
                applied_now.append(migration.version)
            connection.execute("COMMIT")
        except BaseException:
            if not connection.get_autocommit():
                connection.execute("ROLLBACK")
            raise
        if done is None:
            log.info("schema_migration_applied", version=migration.version, name=migration.name)
    return applied_now


def _check_known(connection: apsw.Connection, migrations: tuple[Migration, ...]) -> None:
    check_applied(applied_migrations(connection), migrations)


def check_applied(applied: list[tuple[int, str]], migrations: tuple[Migration, ...]) -> None:
    """Refuse a store whose applied migrations are not a prefix of ``migrations`` (the
    rule every backend keeps).

    Raises:
        SchemaTooNewError: the store has migrations this code does not know.
        StoreError: the applied migrations are not this code's.
    """
    known = [(m.version, m.name) for m in migrations]
    if len(applied) > len(known):
        newest = applied[-1][0]
        raise SchemaTooNewError(
            f"The database is at schema version {newest}, newer than this agentkeep "
            f"understands (up to {known[-1][0] if known else 0}). Upgrade agentkeep to open it."
        )
    if applied != known[: len(applied)]:
        raise StoreError(
            f"The database's applied migrations {applied} do not match this code's list "
            f"{known[: len(applied)]}; it was written by a different build of agentkeep."
        )
