"""The store's schema on PostgreSQL: the same keyed, versioned migrations as on SQLite.

Each entry of :data:`POSTGRES_MIGRATIONS` has the version and name of its SQLite twin in
:data:`agentkeep.persistence.schema.MIGRATIONS` (a store's ``schema_migrations`` reads the
same on both backends) and PostgreSQL's text for the same tables, constraints and rules:

- integers are ``BIGINT`` (SQLite's INTEGER is 64-bit), and every ``TEXT`` column compares
  in the ``"C"`` collation, byte order, as SQLite's ``BINARY`` does (the key-value store's
  prefix ranges and every ``ORDER BY id`` page rely on it, whatever the database's locale);
- SQLite's ``RAISE(ABORT, …)`` triggers are PL/pgSQL trigger functions; a trigger whose
  condition needs a subquery checks it in its function (a ``WHEN`` may not hold one);
- ``turn_inputs`` has a ``rowid`` identity column (insertion order, which one statement orders
  by, as SQLite's implicit rowid);
- the seventh migration changed only SQLite's storage (``WITHOUT ROWID``): here it records
  its marker and changes nothing.

The rules of :mod:`agentkeep.persistence.schema` hold: the list only grows at the end; each
migration commits with its marker row; applied markers must be a prefix of the list, and a
store at a newer version is refused (``SchemaTooNewError``) before anything is written.
Migrations run under the store's advisory lock (the writer's session holds it; partition
owners hold it shared, so each migration also takes the schema's transaction-level setup lock
and checks its marker under it: systems opening one fresh schema at once never race).
"""

from __future__ import annotations

from typing import Any

import psycopg

from agentkeep.logs import get_logger
from agentkeep.persistence import clock
from agentkeep.persistence.postgres.ownership import setup_key
from agentkeep.persistence.schema import MIGRATIONS, Migration, check_applied

__all__ = ["POSTGRES_MIGRATIONS", "applied_migrations", "migrate"]

log = get_logger(__name__)

_T = 'TEXT COLLATE "C"'

_FUNCTIONS = """
CREATE FUNCTION agentkeep_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '%', TG_ARGV[0] USING ERRCODE = 'integrity_constraint_violation';
END $$;

-- Refuses the change unless the row's agent is gone (the cascade of its deletion).
CREATE FUNCTION agentkeep_refuse_while_agent_exists() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM agents WHERE id = OLD.agent_id) THEN
        RAISE EXCEPTION '%', TG_ARGV[0] USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN OLD;
END $$;
"""

_INITIAL = f"""
{_FUNCTIONS}
CREATE TABLE agents (
    id {_T} PRIMARY KEY,
    config_json {_T} NOT NULL,
    metadata_json {_T} NOT NULL,
    parent_id {_T} REFERENCES agents(id) ON DELETE SET NULL,
    created_at_ms BIGINT NOT NULL,
    deleted_at_ms BIGINT
);
CREATE INDEX agents_by_parent ON agents(parent_id) WHERE parent_id IS NOT NULL;

CREATE TABLE records (
    agent_id {_T} NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    position BIGINT NOT NULL,
    record_json {_T} NOT NULL,
    PRIMARY KEY (agent_id, position)
);

CREATE TABLE message_ids (
    agent_id {_T} NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    message_id {_T} NOT NULL,
    PRIMARY KEY (agent_id, message_id)
);

CREATE TABLE queue_tails (
    agent_id {_T} NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    queue {_T} NOT NULL,
    last_seq BIGINT NOT NULL,
    PRIMARY KEY (agent_id, queue)
);

CREATE TABLE queue (
    agent_id {_T} NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    queue {_T} NOT NULL CHECK (queue IN ('steering', 'send')),
    seq BIGINT NOT NULL,
    message_id {_T} NOT NULL,
    envelope_json {_T} NOT NULL,
    PRIMARY KEY (agent_id, queue, seq)
);

CREATE TABLE notices (
    agent_id {_T} NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    seq BIGINT NOT NULL,
    notice_json {_T} NOT NULL,
    PRIMARY KEY (agent_id, seq)
);

CREATE TABLE pending_calls (
    agent_id {_T} NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    internal_id {_T} NOT NULL,
    idx BIGINT NOT NULL,
    call_json {_T} NOT NULL,
    committed_json {_T},
    PRIMARY KEY (agent_id, internal_id)
);
CREATE INDEX pending_calls_in_order ON pending_calls(agent_id, idx);

CREATE TABLE tool_result_claims (
    agent_id {_T} NOT NULL,
    internal_id {_T} NOT NULL,
    result_json {_T} NOT NULL,
    PRIMARY KEY (agent_id, internal_id),
    FOREIGN KEY (agent_id, internal_id)
        REFERENCES pending_calls(agent_id, internal_id) ON DELETE CASCADE
);

CREATE TABLE settings (
    agent_id {_T} PRIMARY KEY REFERENCES agents(id) ON DELETE CASCADE,
    settings_json {_T} NOT NULL
);

CREATE TABLE owed_work (
    agent_id {_T} PRIMARY KEY REFERENCES agents(id) ON DELETE CASCADE,
    owed_json {_T} NOT NULL
);

CREATE TABLE context_tokens (
    agent_id {_T} PRIMARY KEY REFERENCES agents(id) ON DELETE CASCADE,
    tokens BIGINT NOT NULL
);

CREATE TABLE kv (
    key {_T} PRIMARY KEY,
    value_json {_T} NOT NULL
);
"""

_DEFINITION_REGISTRY = f"""
CREATE TABLE definitions (
    id {_T} PRIMARY KEY,
    current_revision BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    deleted_at_ms BIGINT
);

CREATE TABLE definition_revisions (
    id {_T} PRIMARY KEY,
    definition_id {_T} NOT NULL REFERENCES definitions(id),
    number BIGINT NOT NULL CHECK (number >= 1),
    hash {_T} NOT NULL,
    definition_json {_T} NOT NULL,
    created_at_ms BIGINT NOT NULL,
    UNIQUE (definition_id, number)
);

CREATE TRIGGER definitions_are_never_deleted BEFORE DELETE ON definitions
FOR EACH ROW EXECUTE FUNCTION
    agentkeep_refuse('definition identities are never deleted (ids stay reserved)');

CREATE TRIGGER definition_revisions_are_immutable BEFORE UPDATE ON definition_revisions
FOR EACH ROW EXECUTE FUNCTION agentkeep_refuse('definition revisions are immutable');

CREATE TRIGGER definition_revisions_are_never_deleted BEFORE DELETE ON definition_revisions
FOR EACH ROW EXECUTE FUNCTION agentkeep_refuse('definition revisions are never deleted');

CREATE FUNCTION agentkeep_definition_points_at_revision() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM definition_revisions
        WHERE definition_id = NEW.id AND number = NEW.current_revision
    ) THEN
        RAISE EXCEPTION 'a definition must point at one of its own revisions'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER definitions_point_at_their_revisions
BEFORE UPDATE OF current_revision ON definitions
FOR EACH ROW EXECUTE FUNCTION agentkeep_definition_points_at_revision();
"""

_ARCHIVED_HISTORY = f"""
CREATE TABLE archived_epochs (
    agent_id {_T} NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    epoch BIGINT NOT NULL,
    reason {_T} NOT NULL CHECK (reason IN ('model_switch', 'compaction')),
    settings_json {_T},
    archived_at_ms BIGINT NOT NULL,
    purged_at_ms BIGINT,
    PRIMARY KEY (agent_id, epoch)
);

CREATE TABLE archived_records (
    agent_id {_T} NOT NULL,
    epoch BIGINT NOT NULL,
    position BIGINT NOT NULL,
    record_json {_T} NOT NULL,
    PRIMARY KEY (agent_id, epoch, position),
    FOREIGN KEY (agent_id, epoch)
        REFERENCES archived_epochs(agent_id, epoch) ON DELETE CASCADE
);
"""

_SESSIONS = f"""
CREATE TABLE sessions (
    agent_id {_T} PRIMARY KEY REFERENCES agents(id) ON DELETE CASCADE,
    definition_id {_T} REFERENCES definitions(id),
    revision_id {_T} REFERENCES definition_revisions(id),
    revision_number BIGINT,
    driver_session_id {_T},
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    archived_at_ms BIGINT,
    CHECK ((definition_id IS NULL) = (revision_id IS NULL)
       AND (revision_id IS NULL) = (revision_number IS NULL))
);
CREATE INDEX sessions_by_definition ON sessions(definition_id, agent_id)
    WHERE definition_id IS NOT NULL;

CREATE TRIGGER session_pins_are_immutable
BEFORE UPDATE OF definition_id, revision_id, revision_number ON sessions
FOR EACH ROW WHEN (NEW.definition_id IS DISTINCT FROM OLD.definition_id
    OR NEW.revision_id IS DISTINCT FROM OLD.revision_id
    OR NEW.revision_number IS DISTINCT FROM OLD.revision_number)
EXECUTE FUNCTION agentkeep_refuse('a session stays pinned to the revision it started from');

CREATE FUNCTION agentkeep_session_pin_names_revision() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM definition_revisions
        WHERE id = NEW.revision_id AND definition_id = NEW.definition_id
            AND number = NEW.revision_number
    ) THEN
        RAISE EXCEPTION 'a session must pin a revision of its own definition'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER session_pins_name_their_revision
BEFORE INSERT ON sessions
FOR EACH ROW WHEN (NEW.revision_id IS NOT NULL)
EXECUTE FUNCTION agentkeep_session_pin_names_revision();
"""

_SESSION_EVENTS = f"""
CREATE TABLE session_events (
    agent_id {_T} NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    sequence BIGINT NOT NULL CHECK (sequence >= 1),
    type {_T} NOT NULL,
    turn_id {_T},
    data_json {_T} NOT NULL,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (agent_id, sequence)
);

CREATE TRIGGER session_events_are_immutable BEFORE UPDATE ON session_events
FOR EACH ROW EXECUTE FUNCTION agentkeep_refuse('session events are immutable');

CREATE TRIGGER session_events_are_never_deleted BEFORE DELETE ON session_events
FOR EACH ROW EXECUTE FUNCTION
    agentkeep_refuse_while_agent_exists('session events are never deleted');
"""

_TURNS = f"""
CREATE TABLE turns (
    agent_id {_T} NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    number BIGINT NOT NULL CHECK (number >= 1),
    id {_T} NOT NULL UNIQUE,
    idempotency_key {_T} NOT NULL,
    driver {_T} NOT NULL,
    status {_T} NOT NULL CHECK (status IN ('queued', 'running', 'cancelling', 'completed',
        'failed', 'cancelled', 'interrupted')),
    input_json {_T} NOT NULL,
    message_id {_T},
    result_json {_T},
    error_json {_T},
    created_at_ms BIGINT NOT NULL,
    started_at_ms BIGINT,
    completed_at_ms BIGINT,
    PRIMARY KEY (agent_id, number),
    UNIQUE (agent_id, idempotency_key)
);

CREATE INDEX turns_live ON turns (agent_id, number)
WHERE status IN ('queued', 'running', 'cancelling');

CREATE TABLE turn_inputs (
    rowid BIGINT GENERATED ALWAYS AS IDENTITY,
    agent_id {_T} NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    idempotency_key {_T} NOT NULL,
    turn_id {_T} NOT NULL REFERENCES turns(id) ON DELETE CASCADE,
    delivery {_T} NOT NULL CHECK (delivery IN ('send', 'steer')),
    input_hash {_T} NOT NULL,
    message_id {_T},
    PRIMARY KEY (agent_id, idempotency_key)
);

CREATE INDEX turn_inputs_by_message ON turn_inputs (agent_id, message_id);
CREATE INDEX turn_inputs_by_turn ON turn_inputs (turn_id);

CREATE TRIGGER turn_terminal_status_is_final BEFORE UPDATE OF status ON turns
FOR EACH ROW WHEN (OLD.status IN ('completed', 'failed', 'cancelled', 'interrupted')
    AND NEW.status IS DISTINCT FROM OLD.status)
EXECUTE FUNCTION agentkeep_refuse('a terminal turn status never changes');

CREATE TRIGGER turn_identity_is_immutable BEFORE UPDATE ON turns
FOR EACH ROW WHEN (NEW.id IS DISTINCT FROM OLD.id OR NEW.agent_id IS DISTINCT FROM OLD.agent_id
    OR NEW.number IS DISTINCT FROM OLD.number
    OR NEW.idempotency_key IS DISTINCT FROM OLD.idempotency_key
    OR NEW.input_json IS DISTINCT FROM OLD.input_json OR NEW.driver IS DISTINCT FROM OLD.driver)
EXECUTE FUNCTION agentkeep_refuse('a turn keeps its id, number, key, driver and input');

CREATE TRIGGER turns_are_never_deleted BEFORE DELETE ON turns
FOR EACH ROW EXECUTE FUNCTION agentkeep_refuse_while_agent_exists('turns are never deleted');

CREATE TRIGGER turn_inputs_are_immutable BEFORE UPDATE ON turn_inputs
FOR EACH ROW EXECUTE FUNCTION agentkeep_refuse('turn inputs are immutable');

CREATE TRIGGER turn_inputs_are_never_deleted BEFORE DELETE ON turn_inputs
FOR EACH ROW EXECUTE FUNCTION
    agentkeep_refuse_while_agent_exists('idempotency keys are never released');
"""

# SQLite's seventh migration rebuilt tables as WITHOUT ROWID (storage only): nothing to do.
_FEWER_PAGES = "SELECT 1"

# The keys of the modules' own migrations (``agentkeep.modules``), one row per applied key.
_MODULE_MIGRATIONS = """
CREATE TABLE module_migrations (
    module TEXT NOT NULL,
    key TEXT NOT NULL,
    applied_at_ms BIGINT NOT NULL,
    PRIMARY KEY (module, key)
);
"""

# A turn's W3C traceparent, so a resumed turn continues its request's trace.
_TURN_TRACE_PARENT = "ALTER TABLE turns ADD COLUMN trace_parent TEXT;"

# The partition of each agent (``agentkeep.partitions``), which a partition's system filters on.
_AGENT_PARTITION = """
ALTER TABLE agents ADD COLUMN partition INTEGER NOT NULL DEFAULT 0;
CREATE INDEX agents_by_partition ON agents (partition) WHERE deleted_at_ms IS NULL;
"""

_TEXTS = (_INITIAL, _DEFINITION_REGISTRY, _ARCHIVED_HISTORY, _SESSIONS, _SESSION_EVENTS, _TURNS)

_POSTGRES_TEXTS = (
    *_TEXTS,
    _FEWER_PAGES,
    _MODULE_MIGRATIONS,
    _TURN_TRACE_PARENT,
    _AGENT_PARTITION,
)

#: Append-only, in step with ``MIGRATIONS``: the same versions and names, PostgreSQL's text.
POSTGRES_MIGRATIONS: tuple[Migration, ...] = tuple(
    Migration(version=m.version, name=m.name, sql=sql)
    for m, sql in zip(MIGRATIONS, _POSTGRES_TEXTS, strict=True)
)

_MARKER_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version BIGINT PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at_ms BIGINT NOT NULL
)
"""


def applied_migrations(connection: psycopg.Connection[Any]) -> list[tuple[int, str]]:
    """``(version, name)`` of every applied migration in the search path's schema."""
    exists = connection.execute("SELECT to_regclass('schema_migrations')").fetchone()
    if exists is None or exists[0] is None:
        return []
    rows = connection.execute("SELECT version, name FROM schema_migrations ORDER BY version")
    return [(int(version), str(name)) for version, name in rows.fetchall()]


def migrate(
    connection: psycopg.Connection[Any],
    migrations: tuple[Migration, ...] = POSTGRES_MIGRATIONS,
) -> list[int]:
    """Apply every migration the store lacks, each in its own transaction with its marker;
    returns the versions applied now. ``connection`` is in autocommit mode, outside any
    transaction, on the session that holds the store's lock.

    Raises:
        SchemaTooNewError: the store has migrations this code does not know.
        StoreError: the applied migrations are not a prefix of ``migrations``.
    """
    check_applied(applied_migrations(connection), migrations)
    row = connection.execute("SELECT current_schema()").fetchone()
    setup = setup_key(str(row[0]) if row is not None and row[0] is not None else "")
    applied_now: list[int] = []
    for migration in migrations:
        with connection.transaction():
            # Partition owners hold the store's lock shared: several may migrate one schema
            # at once, so each migration (and its marker check) runs under the setup lock.
            connection.execute("SELECT pg_advisory_xact_lock(%s)", (setup,))
            connection.execute(_MARKER_TABLE)
            done = connection.execute(
                "SELECT 1 FROM schema_migrations WHERE version = %s", (migration.version,)
            ).fetchone()
            if done is None:
                connection.execute(migration.sql.encode())
                connection.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at_ms) "
                    "VALUES (%s, %s, %s)",
                    (migration.version, migration.name, clock.now_ms()),  # the injected one
                )
                applied_now.append(migration.version)
        if done is None:
            log.info("schema_migration_applied", version=migration.version, name=migration.name)
    return applied_now
