"""The registry's two tables, inside a store transaction (``work(tx)``).

``definitions`` holds one row per identity: its current revision number and timestamps, and
``deleted_at_ms`` once it is a tombstone. ``definition_revisions`` holds every revision,
immutable, with its canonical JSON and hash. Migration ``definition_registry`` in
:mod:`agentkeep.persistence.schema` creates them, with triggers that refuse deleting an
identity, changing or deleting a revision, and pointing an identity at a revision it lacks.

These functions are the in-transaction API: later work that must read a revision in the same
transaction as its own write (a session pinned to a revision) calls them with its ``tx``.
Each is one statement (or one read) over ``tx.sql`` (:class:`~agentkeep.persistence.sql.
SqlStatements`, the store's sanctioned seam for a module that owns its tables), so it keeps
the transaction's scope checks (expired transactions and writes in a read are refused) and
goes through the backend's dialect like every other statement.
"""

from __future__ import annotations

from typing import Any

from agentkeep.errors import StoreError
from agentkeep.persistence.interface import Transaction
from agentkeep.registry.canonical import decode_definition
from agentkeep.registry.types import DefinitionRecord, Revision
from agentkeep.types.ids import id_cursor

_CURRENT = (
    "SELECT d.id, d.current_revision, d.created_at_ms, d.updated_at_ms, d.deleted_at_ms, "
    "r.id, r.hash, r.definition_json, r.created_at_ms "
    "FROM definitions AS d JOIN definition_revisions AS r "
    "ON r.definition_id = d.id AND r.number = d.current_revision"
)
_REVISION = (
    "SELECT id, definition_id, number, hash, definition_json, created_at_ms "
    "FROM definition_revisions"
)


def _current(row: tuple[Any, ...]) -> tuple[DefinitionRecord, Revision]:
    (
        definition_id,
        number,
        created_at_ms,
        updated_at_ms,
        deleted_at_ms,
        revision_id,
        content_hash,
        definition_json,
        revision_created_at_ms,
    ) = row
    definition = decode_definition(definition_json)
    record = DefinitionRecord(
        id=str(definition_id),
        current_revision_id=str(revision_id),
        current_revision=int(number),
        hash=str(content_hash),
        definition=definition,
        created_at_ms=int(created_at_ms),
        updated_at_ms=int(updated_at_ms),
        deleted_at_ms=None if deleted_at_ms is None else int(deleted_at_ms),
    )
    revision = Revision(
        id=str(revision_id),
        definition_id=str(definition_id),
        number=int(number),
        hash=str(content_hash),
        definition=definition,
        created_at_ms=int(revision_created_at_ms),
    )
    return record, revision


def _revision(row: tuple[Any, ...]) -> Revision:
    revision_id, definition_id, number, content_hash, definition_json, created_at_ms = row
    return Revision(
        id=str(revision_id),
        definition_id=str(definition_id),
        number=int(number),
        hash=str(content_hash),
        definition=decode_definition(definition_json),
        created_at_ms=int(created_at_ms),
    )


# -- reads -------------------------------------------------------------------------------------
def read_current(tx: Transaction, definition_id: str) -> tuple[DefinitionRecord, Revision] | None:
    """The identity (live or deleted) with its current revision, or None if never created."""
    rows = tx.sql.query(f"{_CURRENT} WHERE d.id = ?", (definition_id,))
    return _current(rows[0]) if rows else None


def list_records(
    tx: Transaction, *, include_deleted: bool, after: str | None, limit: int | None
) -> list[DefinitionRecord]:
    """Identities in id order, after ``after`` (exclusive; any string, ``id_cursor``), at
    most ``limit``."""
    rows = tx.sql.query(
        f"{_CURRENT} WHERE (CAST(?1 AS TEXT) IS NULL OR d.id > ?1) "
        "AND (?2 OR d.deleted_at_ms IS NULL) ORDER BY d.id LIMIT ?3",
        (
            None if after is None else id_cursor(after),
            include_deleted,
            -1 if limit is None else limit,
        ),
    )
    return [_current(row)[0] for row in rows]


def read_revision(tx: Transaction, revision_id: str) -> Revision | None:
    """The revision with this id, or None (inside ``tx``)."""
    rows = tx.sql.query(f"{_REVISION} WHERE id = ?", (revision_id,))
    return _revision(rows[0]) if rows else None


def read_revision_number(tx: Transaction, definition_id: str, number: int) -> Revision | None:
    """Revision ``number`` of definition ``definition_id``, or None (inside ``tx``)."""
    rows = tx.sql.query(
        f"{_REVISION} WHERE definition_id = ? AND number = ?", (definition_id, number)
    )
    return _revision(rows[0]) if rows else None


def list_revisions(
    tx: Transaction, definition_id: str, *, after: int | None, limit: int | None
) -> list[Revision]:
    """A definition's revisions by number, after ``after`` (exclusive), at most ``limit``."""
    rows = tx.sql.query(
        f"{_REVISION} WHERE definition_id = ?1 AND number > ?2 ORDER BY number LIMIT ?3",
        (definition_id, 0 if after is None else after, -1 if limit is None else limit),
    )
    return [_revision(row) for row in rows]


# -- writes ------------------------------------------------------------------------------------
def claim_identity(tx: Transaction, definition_id: str, now_ms: int) -> bool:
    """Insert-if-absent of the identity row (pointing at revision 1, which the caller inserts
    in the same transaction); False if the id was ever taken, deleted ones included."""
    return (
        tx.sql.execute(
            "INSERT OR IGNORE INTO definitions "
            "(id, current_revision, created_at_ms, updated_at_ms) VALUES (?, 1, ?, ?)",
            (definition_id, now_ms, now_ms),
        )
        == 1
    )


def insert_revision(tx: Transaction, revision: Revision, canonical: bytes) -> None:
    """Append an immutable revision (its number must be new for its definition)."""
    tx.sql.execute(
        "INSERT INTO definition_revisions "
        "(id, definition_id, number, hash, definition_json, created_at_ms) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (
            revision.id,
            revision.definition_id,
            revision.number,
            revision.hash,
            canonical.decode(),  # text, not bytes: apsw binds bytes as BLOB
            revision.created_at_ms,
        ),
    )


def next_number(tx: Transaction, definition_id: str) -> int:
    """One past the highest revision number: numbers are dense and never reused."""
    rows = tx.sql.query(
        "SELECT coalesce(max(number), 0) FROM definition_revisions WHERE definition_id = ?",
        (definition_id,),
    )
    return 1 + int(rows[0][0])


def move_current(tx: Transaction, definition_id: str, number: int, now_ms: int) -> None:
    """Point a live identity at its revision ``number`` (the trigger checks it exists)."""
    changed = tx.sql.execute(
        "UPDATE definitions SET current_revision = ?, updated_at_ms = ? "
        "WHERE id = ? AND deleted_at_ms IS NULL",
        (number, now_ms, definition_id),
    )
    if changed != 1:
        raise StoreError(f'Definition "{definition_id}" is not live; its pointer cannot move.')


def tombstone(tx: Transaction, definition_id: str, now_ms: int) -> bool:
    """Mark a live identity deleted; False if it is not live."""
    return (
        tx.sql.execute(
            "UPDATE definitions SET deleted_at_ms = ?1, updated_at_ms = ?1 "
            "WHERE id = ?2 AND deleted_at_ms IS NULL",
            (now_ms, definition_id),
        )
        == 1
    )
