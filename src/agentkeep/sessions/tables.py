"""The ``sessions`` table, inside a store transaction (``work(tx)``).

One row per agent started from a definition (its pin) or whose session record changed
(archived, a driver session id); an agent without a row is an active, definition-less
session. The pin (``definition_id``, ``revision_id``, ``revision_number``) is written once,
with the agent's row, and never changes: migration ``sessions`` in
:mod:`agentkeep.persistence.schema` refuses an update of it and a pin to a revision of another
definition. The row cascades from ``agents``, so re-creating a deleted agent id starts clean.

Every statement runs through ``tx.sql`` (:class:`~agentkeep.persistence.sql.SqlStatements`),
the store's sanctioned seam for a module that owns its tables.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentkeep.persistence.codec import decode_object
from agentkeep.persistence.interface import Transaction
from agentkeep.registry.canonical import decode_definition
from agentkeep.registry.types import Definition, Revision
from agentkeep.sessions import owing as owing_work
from agentkeep.sessions.types import SessionRecord
from agentkeep.types.ids import id_cursor
from agentkeep.types.turns import NATIVE_DRIVER

_SELECT = (
    "SELECT a.id, a.metadata_json, a.created_at_ms, s.definition_id, s.revision_id, "
    "s.revision_number, s.driver_session_id, s.updated_at_ms, s.archived_at_ms, "
    "EXISTS (SELECT 1 FROM owed_work AS o WHERE o.agent_id = a.id) "
    "FROM agents AS a LEFT JOIN sessions AS s ON s.agent_id = a.id "
    "WHERE a.deleted_at_ms IS NULL"
)


def _record(tx: Transaction, row: tuple[Any, ...]) -> SessionRecord:
    (
        agent_id,
        metadata_json,
        created_at_ms,
        definition_id,
        revision_id,
        revision_number,
        driver_session_id,
        updated_at_ms,
        archived_at_ms,
        owing,
    ) = row
    return SessionRecord(
        id=str(agent_id),
        definition_id=None if definition_id is None else str(definition_id),
        revision_id=None if revision_id is None else str(revision_id),
        revision_number=None if revision_number is None else int(revision_number),
        status="active" if archived_at_ms is None else "archived",
        driver_session_id=None if driver_session_id is None else str(driver_session_id),
        metadata=decode_object(metadata_json),
        created_at_ms=int(created_at_ms),
        updated_at_ms=int(created_at_ms if updated_at_ms is None else updated_at_ms),
        archived_at_ms=None if archived_at_ms is None else int(archived_at_ms),
        # Only a session owing work can owe it without a live turn (its turns read then).
        owes=owing_work.owes(tx, str(agent_id)) if owing else None,
    )


# -- reads -------------------------------------------------------------------------------------
def read_session(tx: Transaction, session_id: str) -> SessionRecord | None:
    """The live (not deleted) agent ``session_id`` as a session, or None."""
    rows = tx.sql.query(f"{_SELECT} AND a.id = ?", (session_id,))
    return _record(tx, rows[0]) if rows else None


def session_exists(tx: Transaction, session_id: str) -> bool:
    """True if :func:`read_session` would find ``session_id``: a live (not deleted) agent.
    One indexed lookup, without building the record (whose owed work reads the live turns)."""
    rows = tx.sql.query(
        "SELECT 1 FROM agents WHERE id = ? AND deleted_at_ms IS NULL", (session_id,)
    )
    return bool(rows)


def list_sessions(
    tx: Transaction,
    *,
    definition_id: str | None,
    include_archived: bool,
    after: str | None,
    limit: int | None,
) -> list[SessionRecord]:
    """Live agents as sessions in id order, after ``after`` (exclusive), at most ``limit``;
    only those pinned to ``definition_id`` if given; archived ones only if asked. ``after``
    may be any string (``id_cursor``); a ``definition_id`` holding a NUL is no id: none."""
    if definition_id is not None and "\x00" in definition_id:
        return []  # and PostgreSQL's text cannot carry it
    rows = tx.sql.query(
        f"{_SELECT} AND (CAST(?1 AS TEXT) IS NULL OR s.definition_id = ?1) "
        "AND (?2 OR s.archived_at_ms IS NULL) AND (CAST(?3 AS TEXT) IS NULL OR a.id > ?3) "
        "ORDER BY a.id LIMIT ?4",
        (
            definition_id,
            include_archived,
            None if after is None else id_cursor(after),
            -1 if limit is None else limit,
        ),
    )
    return [_record(tx, row) for row in rows]


def pinned_definition(tx: Transaction, session_id: str) -> Definition | None:
    """The definition of the revision ``session_id`` is pinned to, or None if it has no pin
    (a deleted definition's revisions stay readable, so its sessions keep working)."""
    rows = tx.sql.query(
        "SELECT r.definition_json FROM sessions AS s "
        "JOIN definition_revisions AS r ON r.id = s.revision_id WHERE s.agent_id = ?",
        (session_id,),
    )
    return decode_definition(rows[0][0]) if rows else None


def session_driver(tx: Transaction, session_id: str) -> str:
    """The driver that runs the session's turns: its pinned revision's ``driver.id``, or
    ``agentkeep`` (the native loop) for a session without a pin."""
    # Read on every acceptance: a scalar subquery, measured ~8x cheaper than the equivalent
    # join (same answer: no session, no pin or no driver id all read as the native loop).
    # Remembered by the writer: sessions rows change only through tx.sql.execute or the agents
    # cascade, and revisions never change. The driver id is decoded here, not extracted in
    # SQL: PostgreSQL's JSON functions refuse a document holding a ``\u0000`` anywhere (a
    # description may hold a NUL, as on SQLite), and msgspec reads only ``driver.id``.
    rows = tx.sql.query_remembered(
        session_id,
        "SELECT (SELECT r.definition_json FROM definition_revisions AS r "
        "WHERE r.id = s.revision_id) FROM sessions AS s WHERE s.agent_id = ?",
        (session_id,),
    )
    if not rows or rows[0][0] is None:
        return NATIVE_DRIVER
    driver = _DRIVER_OF.decode(rows[0][0]).driver
    return NATIVE_DRIVER if driver is None or driver.id is None else driver.id


class _DriverId(msgspec.Struct):
    id: str | None = None


class _DriverOf(msgspec.Struct):
    """The one field of a definition's document a turn's acceptance needs."""

    driver: _DriverId | None = None


_DRIVER_OF = msgspec.json.Decoder(_DriverOf)


# -- writes ------------------------------------------------------------------------------------
def insert_pin(tx: Transaction, session_id: str, revision: Revision, now_ms: int) -> None:
    """Pin the just-created agent ``session_id`` to ``revision`` (once: the pin is immutable)."""
    tx.sql.execute(
        "INSERT INTO sessions (agent_id, definition_id, revision_id, revision_number, "
        "created_at_ms, updated_at_ms) VALUES (?, ?, ?, ?, ?, ?)",
        (session_id, revision.definition_id, revision.id, revision.number, now_ms, now_ms),
    )


def archive(tx: Transaction, session_id: str, now_ms: int) -> None:
    """Mark the session archived (making its row if it had none)."""
    _ensure_row(tx, session_id, now_ms)
    tx.sql.execute(
        "UPDATE sessions SET archived_at_ms = ?1, updated_at_ms = ?1 "
        "WHERE agent_id = ?2 AND archived_at_ms IS NULL",
        (now_ms, session_id),
    )


def set_driver_session_id(tx: Transaction, session_id: str, value: str | None, now_ms: int) -> None:
    """Store the driver's opaque session id for ``session_id`` (a driver calls this; it
    replaces the previous value)."""
    _ensure_row(tx, session_id, now_ms)
    tx.sql.execute(
        "UPDATE sessions SET driver_session_id = ?, updated_at_ms = ? WHERE agent_id = ?",
        (value, now_ms, session_id),
    )


def _ensure_row(tx: Transaction, session_id: str, now_ms: int) -> None:
    tx.sql.execute(
        "INSERT OR IGNORE INTO sessions (agent_id, created_at_ms, updated_at_ms) VALUES (?, ?, ?)",
        (session_id, now_ms, now_ms),
    )
