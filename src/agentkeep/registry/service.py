"""The registry service: create, update, delete, get and list definitions through the store.

The rules of docs/registry.md:

- **create** makes the identity and revision 1 in one transaction. An id that was ever taken
  is refused (:class:`DefinitionExistsError`), a deleted one too: ids stay reserved so old
  revisions and the sessions pinned to them are never confused with a new definition.
- **update** applies the PATCH rules (:mod:`agentkeep.registry.patch`) to the current
  revision and compares content hashes. Equal content writes nothing and keeps the current
  revision (``changed=False``); changed content appends revision *n+1* and moves the current
  pointer, in one transaction. Returning to the content of an older revision appends a *new*
  number: the timeline only grows. A deleted definition cannot be updated.
- **delete** sets the tombstone; revisions stay readable (``get(include_deleted=True)``,
  ``get_revision``). Deleting a deleted definition changes nothing and returns it (a retry
  after an unknown commit outcome is safe).

Every write is one ``work(tx)`` run by the store's single writer, so two concurrent creates
of one id have exactly one winner, and an update reads and moves the pointer atomically (no
lost update). Reads run on a snapshot of committed state in the caller's thread. A write that
fails with ``CommitOutcomeUnknownError`` may have committed: re-read by id before retrying.

Every input is judged before any record is read, so invalid input is a 422 naming the field
whatever the state of the definition it names (a deleted one included). Then the owner's
:data:`DefinitionCheck` (``AgentSystem`` passes one: the model a definition names is one its
providers serve) judges what the write would make: a create always, an update when its patch
gives ``model`` or ``driver`` (so a definition whose provider has since gone stays readable
and editable in its other fields; a session of it is refused at start).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias, TypeVar

from msgspec import UNSET

from agentkeep._admission import Admission
from agentkeep.errors import AgentClosedError, StoreClosedError
from agentkeep.persistence.codec import now_ms
from agentkeep.persistence.interface import StoreHandle, Transaction
from agentkeep.registry import tables
from agentkeep.registry.errors import (
    DefinitionDeletedError,
    DefinitionExistsError,
    UnknownDefinitionError,
    UnknownRevisionError,
)
from agentkeep.registry.patch import apply_patch, new_definition
from agentkeep.registry.types import (
    Definition,
    DefinitionInput,
    DefinitionPatch,
    DefinitionRecord,
    DefinitionUpdate,
    Revision,
)
from agentkeep.registry.validation import check_id, checked
from agentkeep.types import new_id
from agentkeep.types.ids import is_valid_id

#: What a create or an update accepts: the struct, a mapping with the wire's field
#: names, or JSON text.
InputLike: TypeAlias = DefinitionInput | Mapping[str, Any] | bytes | str
PatchLike: TypeAlias = DefinitionPatch | Mapping[str, Any] | bytes | str

T = TypeVar("T")

#: What the registry's owner checks of a definition about to be written, beyond the
#: registry's own rules (the system it belongs to: its providers): it raises an
#: ``InvalidDefinitionError`` naming the field, or returns.
DefinitionCheck: TypeAlias = Callable[[Definition], None]


class Registry:
    """Versioned definitions (the wire's agents) in the store of an ``AgentSystem``.

    Use ``AgentSystem.registry``. Every method raises ``AgentClosedError`` once the system
    is closing.

    Args:
        store: The store's handle (writes go through its writer).
        admission: The owning system's admission, so writes are admitted (and waited for by
            ``close``) like every other operation; None outside a system.
        check: What the owner checks of a definition about to be written (module doc);
            None: the registry's own rules only.
        owner: Called before every write: raises (``PartitionNotOwnedError``) when this
            system may not write the registry (a partition other than 0); None: it may.
    """

    def __init__(
        self,
        store: StoreHandle,
        *,
        admission: Admission | None = None,
        check: DefinitionCheck | None = None,
        owner: Callable[[], None] | None = None,
    ) -> None:
        self._store = store
        self._owner = owner
        self._admission = admission
        self._check = check

    # -- writes --------------------------------------------------------------------------------
    def create(self, definition: InputLike) -> DefinitionRecord:
        """Create a definition: its identity and revision 1, atomically.

        Raises:
            InvalidDefinitionError: the input breaks a rule, or the owner's check refuses
                it (the field is named).
            DefinitionExistsError: the id is taken (live or deleted).
        """
        draft = checked(definition, DefinitionInput)
        made = new_definition(draft)
        if self._check is not None:
            self._check(made.definition)

        def work(tx: Transaction) -> DefinitionRecord:
            now = now_ms()
            if not tables.claim_identity(tx, draft.id, now):
                existing = tables.read_current(tx, draft.id)
                deleted = existing is not None and existing[0].deleted
                raise DefinitionExistsError(draft.id, deleted=deleted)
            revision = Revision(
                id=new_id(),
                definition_id=draft.id,
                number=1,
                hash=made.hash,
                definition=made.definition,
                created_at_ms=now,
            )
            tables.insert_revision(tx, revision, made.json)
            return DefinitionRecord(
                id=draft.id,
                current_revision_id=revision.id,
                current_revision=1,
                hash=made.hash,
                definition=made.definition,
                created_at_ms=now,
                updated_at_ms=now,
            )

        return self._write(work)

    def update(self, definition_id: str, patch: PatchLike) -> DefinitionUpdate:
        """Apply a PATCH (the PATCH rules of docs/registry.md) to the current revision.

        Returns:
            The record, its current revision, and whether a revision was appended.

        Raises:
            InvalidDefinitionError: the patch or its result breaks a rule, changes the id,
                or the owner's check refuses the result (module doc).
            UnknownDefinitionError: no such definition.
            DefinitionDeletedError: the definition was deleted.
        """
        change = checked(patch, DefinitionPatch)
        self._judge(definition_id, change)

        def work(tx: Transaction) -> DefinitionUpdate:
            record, current = self._live(tx, definition_id)
            result = apply_patch(record.definition, change)
            # Equal hash, equal content: nothing is written and the revision is kept.
            if result.hash == record.hash:
                return DefinitionUpdate(record=record, revision=current, changed=False)
            now = now_ms()
            revision = Revision(
                id=new_id(),
                definition_id=definition_id,
                number=tables.next_number(tx, definition_id),
                hash=result.hash,
                definition=result.definition,
                created_at_ms=now,
            )
            tables.insert_revision(tx, revision, result.json)
            tables.move_current(tx, definition_id, revision.number, now)
            updated = DefinitionRecord(
                id=definition_id,
                current_revision_id=revision.id,
                current_revision=revision.number,
                hash=revision.hash,
                definition=revision.definition,
                created_at_ms=record.created_at_ms,
                updated_at_ms=now,
            )
            return DefinitionUpdate(record=updated, revision=revision, changed=True)

        return self._write(work)

    def delete(self, definition_id: str) -> DefinitionRecord:
        """Tombstone a definition; its id stays reserved and its revisions readable.

        Returns:
            The deleted record (the same one again if it was already deleted).

        Raises:
            UnknownDefinitionError: no such definition.
        """

        def work(tx: Transaction) -> DefinitionRecord:
            found = tables.read_current(tx, definition_id)
            if found is None:
                raise UnknownDefinitionError(definition_id)
            record = found[0]
            if record.deleted:
                return record
            now = now_ms()
            tables.tombstone(tx, definition_id, now)
            return DefinitionRecord(
                id=record.id,
                current_revision_id=record.current_revision_id,
                current_revision=record.current_revision,
                hash=record.hash,
                definition=record.definition,
                created_at_ms=record.created_at_ms,
                updated_at_ms=now,
                deleted_at_ms=now,
            )

        return self._write(work)

    # -- reads ---------------------------------------------------------------------------------
    def get(self, definition_id: str, *, include_deleted: bool = False) -> DefinitionRecord:
        """The definition with its current revision.

        Raises:
            UnknownDefinitionError: no such definition.
            DefinitionDeletedError: it was deleted and ``include_deleted`` is False.
        """
        found = self._read(lambda tx: tables.read_current(tx, definition_id))
        if found is None:
            raise UnknownDefinitionError(definition_id)
        if found[0].deleted and not include_deleted:
            raise DefinitionDeletedError(definition_id)
        return found[0]

    def get_revision(self, revision_id: str) -> Revision:
        """A revision by its id (deleted definitions' revisions included).

        Raises:
            UnknownRevisionError: no revision has this id.
        """
        revision = self._read(lambda tx: tables.read_revision(tx, revision_id))
        if revision is None:
            raise UnknownRevisionError(f'with id "{revision_id}"')
        return revision

    def get_revision_number(self, definition_id: str, number: int) -> Revision:
        """Revision ``number`` of a definition (deleted definitions included).

        Raises:
            UnknownRevisionError: the definition has no such revision.
        """
        revision = self._read(lambda tx: tables.read_revision_number(tx, definition_id, number))
        if revision is None:
            raise UnknownRevisionError(f'{number} of definition "{definition_id}"')
        return revision

    def revisions(
        self, definition_id: str, *, after: int | None = None, limit: int | None = None
    ) -> builtins.list[Revision]:
        """A definition's revisions in number order (``after``: exclusive number cursor).

        Raises:
            UnknownDefinitionError: no such definition (deleted ones are listed).
        """
        _check_limit(limit)

        def work(tx: Transaction) -> builtins.list[Revision] | None:
            if tables.read_current(tx, definition_id) is None:
                return None
            return tables.list_revisions(tx, definition_id, after=after, limit=limit)

        found = self._read(work)
        if found is None:
            raise UnknownDefinitionError(definition_id)
        return found

    def list(
        self,
        *,
        include_deleted: bool = False,
        after: str | None = None,
        limit: int | None = None,
    ) -> builtins.list[DefinitionRecord]:
        """Definitions in id order: live ones, or all with ``include_deleted``.

        Args:
            include_deleted: Include tombstones.
            after: Start after this id (exclusive): the last id of the previous page.
            limit: At most this many (None: all).
        """
        _check_limit(limit)
        return self._read(
            lambda tx: tables.list_records(
                tx, include_deleted=include_deleted, after=after, limit=limit
            )
        )

    # -- internals -----------------------------------------------------------------------------
    def _judge(self, definition_id: str, change: DefinitionPatch) -> None:
        """Refuse an invalid ``change`` before any record is read (module doc).

        The patch's own values are judged on a blank definition with the path's id (every
        rule but the total size reads only the values the patch gives, and a body ``id``
        must equal the path's); then the owner's
        check judges the patched current revision, read just before the write, if the patch
        gives ``model`` or ``driver``. A definition that is absent or deleted here is left to
        the write, which refuses it.
        """
        if change.id is not UNSET:
            check_id(change.id)
        if not is_valid_id(definition_id):
            return  # no definition has this id: the write answers 404
        apply_patch(Definition(id=definition_id, name=definition_id), change)
        if self._check is None or (change.model is UNSET and change.driver is UNSET):
            return
        found = self._read(lambda tx: tables.read_current(tx, definition_id))
        if found is not None and not found[0].deleted:
            self._check(apply_patch(found[0].definition, change).definition)

    @staticmethod
    def _live(tx: Transaction, definition_id: str) -> tuple[DefinitionRecord, Revision]:
        found = tables.read_current(tx, definition_id)
        if found is None:
            raise UnknownDefinitionError(definition_id)
        if found[0].deleted:
            raise DefinitionDeletedError(definition_id)
        return found

    def _write(self, work: Callable[[Transaction], T]) -> T:
        if self._owner is not None:
            self._owner()  # a partition other than 0 may not write the registry
        if self._admission is None:
            return self._store.transact(work)
        with self._admission.operation():
            return self._closed_as_agent_closed(lambda: self._store.transact(work))

    def _read(self, work: Callable[[Transaction], T]) -> T:
        if self._admission is None:
            return self._store.read(work)
        self._admission.check_open()
        return self._closed_as_agent_closed(lambda: self._store.read(work))

    @staticmethod
    def _closed_as_agent_closed(call: Callable[[], T]) -> T:
        try:
            return call()
        except StoreClosedError:
            raise AgentClosedError("The agent system has been closed.") from None


def _check_limit(limit: int | None) -> None:
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
