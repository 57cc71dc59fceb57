"""The read half of the :class:`~agentkeep.mcp.backend.Backend` over a store read without its
lock, for the read-only commands (``agent list/show``, ``session list/show/events``): they
work while another process owns the store, as ``list``, ``show`` and ``transcript`` do.

Definitions are read by the registry itself (over the read-only store), so its refusals
(``unknown_definition``, ``definition_deleted``) are the ones the daemon sends; sessions,
turns and events by the same table reads the sessions service makes; ``follow`` tails the
ledger by reading it again every :data:`POLL_SECONDS` (``session events --follow``, so one
terminal can watch while another talks). Anything that writes or waits for a turn is not a
read: it raises ``NotImplementedError`` (no read-only command calls it).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Generator
from typing import NoReturn, TypeVar

from agentkeep.agent_system.compaction import Compaction
from agentkeep.cli.reading import Reader
from agentkeep.delivery import DeliveryKind
from agentkeep.mcp.backend import Backend, ticking
from agentkeep.mcp.types import AgentMessage
from agentkeep.persistence.interface import Transaction
from agentkeep.registry import DefinitionRecord, DefinitionUpdate, Registry, Revision
from agentkeep.sessions import SessionRecord, UnknownSessionError, UnknownTurnError
from agentkeep.sessions import tables as session_tables
from agentkeep.types import JSONObject, MessageOptions, SessionEvent
from agentkeep.types.ledger import MAX_EVENTS_PAGE
from agentkeep.types.turns import SentTurn, TurnRecord

T = TypeVar("T")

# How often ``follow`` reads the store again for new events: a reader in another process
# than the writer has no wake-up to wait on, so it polls (short next to a model's block).
POLL_SECONDS = 0.1


class _ReadHandle:
    """A store handle that only reads (the registry's reads call ``read`` only)."""

    def __init__(self, reader: Reader) -> None:
        self._reader = reader

    def read(self, work: Callable[[Transaction], T]) -> T:
        return self._reader.read(work)

    def transact(self, work: Callable[[Transaction], T], **_: object) -> T:
        raise NotImplementedError("a read-only store does not write")


def _not_a_read(name: str) -> NoReturn:
    raise NotImplementedError(f"{name} writes or waits: open the system, not a reader")


class _Tail:
    """A session's events after a sequence, read page by page from a store without its lock;
    :meth:`next` waits for the next one by reading again every :data:`POLL_SECONDS`."""

    def __init__(self, reader: Reader, session_id: str, after: int) -> None:
        self._reader = reader
        self._session_id = session_id
        self._last = after
        self._buffer: deque[SessionEvent] = deque()

    def _page(self, tx: Transaction) -> list[SessionEvent]:
        return tx.ledger.events(self._session_id, self._last, MAX_EVENTS_PAGE)

    def next(self, timeout_seconds: float | None) -> SessionEvent:
        """The next event (``TimeoutError`` if none committed within ``timeout_seconds``)."""
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        while not self._buffer:
            last = self._last
            self._buffer.extend(self._reader.read(self._page))
            if self._buffer:
                break
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError(f"no event of session {self._session_id!r} after {last}")
            time.sleep(POLL_SECONDS if remaining is None else min(POLL_SECONDS, remaining))
        event = self._buffer.popleft()
        self._last = event.sequence
        return event


class StoreReader(Backend):
    """The reads of :class:`~agentkeep.mcp.backend.Backend` over ``reader`` (no lock)."""

    def __init__(self, reader: Reader) -> None:
        self._reader = reader
        self._registry = Registry(_ReadHandle(reader))

    # -- reads -------------------------------------------------------------------------------
    def list_definitions(
        self, *, include_deleted: bool, after: str | None, limit: int
    ) -> list[DefinitionRecord]:
        return self._registry.list(include_deleted=include_deleted, after=after, limit=limit)

    def get_definition(self, definition_id: str, *, include_deleted: bool) -> DefinitionRecord:
        return self._registry.get(definition_id, include_deleted=include_deleted)

    def get_revision(self, revision_id: str) -> Revision:
        """One revision of a definition (not on the Backend: the wire has no such route)."""
        return self._registry.get_revision(revision_id)

    def get_session(self, session_id: str) -> SessionRecord:
        found = self._reader.read(lambda tx: session_tables.read_session(tx, session_id))
        if found is None:
            raise UnknownSessionError(session_id)
        return found

    def list_sessions(
        self,
        *,
        definition_id: str | None,
        include_archived: bool,
        after: str | None,
        limit: int,
    ) -> list[SessionRecord]:
        return self._reader.read(
            lambda tx: session_tables.list_sessions(
                tx,
                definition_id=definition_id,
                include_archived=include_archived,
                after=after,
                limit=limit,
            )
        )

    def get_turn(self, session_id: str, turn_id: str) -> TurnRecord:
        found = self._reader.read(
            lambda tx: self._known(tx, session_id).turns.read(session_id, turn_id)
        )
        if found is None:
            raise UnknownTurnError(session_id, turn_id)
        return found

    def turns(self, session_id: str, *, after: int, limit: int) -> list[TurnRecord]:
        return self._reader.read(
            lambda tx: self._known(tx, session_id).turns.page(session_id, after, limit)
        )

    def events(self, session_id: str, *, after: int, limit: int) -> list[SessionEvent]:
        self.get_session(session_id)  # as SystemBackend: an unknown session is an error
        return self._reader.read(
            lambda tx: tx.ledger.events(session_id, after, min(limit, MAX_EVENTS_PAGE))
        )

    def follow(
        self,
        session_id: str,
        *,
        after: int,
        turn_id: str | None = None,
        idle_seconds: float | None = None,
    ) -> Generator[SessionEvent | None, None, None]:
        """The ledger after ``after``, then each event as another process commits it: the
        store is read again every :data:`POLL_SECONDS` (a reader cannot be woken by a
        writer in another process); the iteration never ends by itself without ``turn_id``."""
        self.get_session(session_id)  # as the daemon: an unknown session is an error
        return ticking(
            _Tail(self._reader, session_id, after).next, turn_id=turn_id, idle_seconds=idle_seconds
        )

    @staticmethod
    def _known(tx: Transaction, session_id: str) -> Transaction:
        if not tx.ledger.agent_known(session_id):
            raise UnknownSessionError(session_id)
        return tx

    # -- not reads ---------------------------------------------------------------------------
    def create_definition(self, definition: JSONObject) -> DefinitionRecord:
        _not_a_read("create_definition")

    def update_definition(self, definition_id: str, patch: JSONObject) -> DefinitionUpdate:
        _not_a_read("update_definition")

    def delete_definition(self, definition_id: str) -> DefinitionRecord:
        _not_a_read("delete_definition")

    def start_session(
        self,
        definition_id: str,
        *,
        session_id: str | None,
        metadata: JSONObject | None,
        revision_id: str | None = None,
    ) -> SessionRecord:
        _not_a_read("start_session")

    def archive_session(self, session_id: str) -> SessionRecord:
        _not_a_read("archive_session")

    def send(
        self,
        session_id: str,
        message: str | AgentMessage,
        *,
        delivery: DeliveryKind,
        idempotency_key: str | None,
        metadata: JSONObject | None,
        message_id: str | None = None,
        options: MessageOptions | None = None,
    ) -> SentTurn:
        _not_a_read("send")

    def wait_turn(self, session_id: str, turn_id: str, *, timeout_seconds: float) -> TurnRecord:
        _not_a_read("wait_turn")

    def cancel_turn(self, session_id: str, turn_id: str | None) -> TurnRecord:
        _not_a_read("cancel_turn")

    def settle_session(self, session_id: str, *, note: str | None = None) -> SessionRecord:
        _not_a_read("settle_session")

    def compact(self, session_id: str, *, timeout_seconds: float) -> Compaction:
        _not_a_read("compact")
