"""The sessions service: start a session from a definition's revision, read, list, archive.

A session is an agentkeep agent (session id = agent id; docs/architecture.md). Starting one is one
transaction through the store's writer: the revision is read (the current one, or the one
asked for), everything it configures is checked (:mod:`agentkeep.sessions.setup`), and the
agent's row, its pin and its starting settings are written together, so a refused start
leaves nothing behind and a start never pins a revision an edit has since replaced without
saying so. Later edits of the definition never change the session: its instructions and
tools are read from the pinned (immutable) revision whenever its actor is made, and its
model lives in its own durable settings.

Archiving is refused while the session is busy (a live turn, or owed work), naming the way
out (``sessions.owing``); ``settle`` ends owed work no turn holds. An archived session stays
readable and is listed only with ``include_archived``.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from agentkeep.agent_system._rows import new_agent_row
from agentkeep.config import AgentConfig
from agentkeep.delivery import DeliveryKind
from agentkeep.errors import (
    AgentClosedError,
    AgentExistsError,
    InvalidMessageError,
    StoreClosedError,
)
from agentkeep.loop.actions import check_message_id
from agentkeep.messages import as_message
from agentkeep.modules import AgentSnapshot
from agentkeep.persistence.codec import now_ms
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.ledger import check_page
from agentkeep.registry import tables as registry_tables
from agentkeep.registry.errors import (
    DefinitionDeletedError,
    UnknownDefinitionError,
    UnknownRevisionError,
)
from agentkeep.registry.types import Revision
from agentkeep.runtime import owed_ending
from agentkeep.sessions import owing, setup, tables
from agentkeep.sessions.errors import SessionBusyError, UnknownSessionError
from agentkeep.sessions.turning import TurnHandle, TurnService
from agentkeep.sessions.types import SessionRecord
from agentkeep.types import JSONObject, MessageOptions, QueueableMessage, Settings
from agentkeep.types.parts import WireMessage
from agentkeep.types.turns import TurnRecord

if TYPE_CHECKING:
    # An annotation only: the parts are built (and this module imported) by the system.
    from agentkeep.agent_system._internals import SystemInternals

T = TypeVar("T")


class Sessions:
    """Sessions of an ``AgentSystem``: use ``AgentSystem.sessions``.

    Every method raises ``AgentClosedError`` once the system is closing.

    Args:
        parts: The owning system's parts: its store, its admission (writes are admitted like
            every operation), its providers, tools and features (a revision's model, tool ids
            and a new agent's config are checked against them), its default settings (for a
            revision without a model), its acceptance (a turn's message takes the system's
            one acceptance path), its requests (abort, wake) and its drivers.
    """

    def __init__(self, parts: SystemInternals) -> None:
        self._store = parts.store.handle
        self._admission = parts.admission
        self._providers = parts.providers
        self._tools = parts.tools
        self._features = parts.features
        self._defaults = parts.defaults
        self._is_running = parts.is_running
        self._drivers = parts.drivers.ids
        self._requests = parts.requests
        self._modules = parts.modules
        self._turns = TurnService(parts)
        self._ownership = parts.ownership

    def start(
        self,
        definition_id: str,
        *,
        revision_id: str | None = None,
        id: str | None = None,
        metadata: JSONObject | None = None,
    ) -> SessionRecord:
        """Start a session pinned to the definition's current revision (or ``revision_id``).

        Its loop does not start until a message is sent to it (``AgentSystem.send(id, …)``).

        Args:
            definition_id: The definition (it must not be deleted).
            revision_id: A revision of that definition to pin instead of the current one.
            id: The session (agent) id; a fresh one if None.
            metadata: The session's (agent's) metadata.

        Raises:
            UnknownDefinitionError: no such definition.
            DefinitionDeletedError: the definition was deleted (its sessions keep working,
                new ones are refused).
            UnknownRevisionError: ``revision_id`` is not a revision of this definition.
            UnsupportedDriverError: the revision names a driver that is neither
                ``agentkeep`` nor registered (``AgentSystem.open(drivers=...)``).
            SessionConfigError: a tool id, the provider or a model setting is refused.
            ModelNotServedError: the provider does not serve the revision's model.
            InvalidIdError: the id breaks the id rule (1-128 of ``[a-z0-9._-]``, not ``.``
                or ``..``); ``field`` is ``sessionId``.
            InvalidConfigError: the metadata is invalid.
            AgentExistsError: the id is taken.
        """
        row = new_agent_row(
            AgentConfig(metadata=metadata or {}),
            self._features,
            id,
            None,
            what="session id",
            field="sessionId",
            ownership=self._ownership,
        )

        def checked(revision: Revision) -> Settings | None:
            return setup.check(
                revision.definition,
                providers=self._providers,
                tools=self._tools,
                defaults=self._defaults,
                drivers=self._drivers,
                features=self._features,
            )

        # Checked once before the transaction too: a provider built on first use (a
        # providers.toml adapter importing its SDK) is built here, not on the writer's thread
        # where it would hold up every other write; the check inside is then quick.
        checked(self._read(lambda tx: self._revision(tx, definition_id, revision_id)))

        def work(tx: Transaction) -> SessionRecord:
            revision = self._revision(tx, definition_id, revision_id)
            settings = checked(revision)
            if not tx.agents.create(row, partition=self._ownership.partition_of(row.id)):
                raise AgentExistsError(row.id)
            now = now_ms()
            tables.insert_pin(tx, row.id, revision, now)
            if settings is not None and revision.definition.model is not None:
                # Without a model the session follows the system's defaults, like any agent.
                tx.facts.write_settings(row.id, settings)
            found = tables.read_session(tx, row.id)
            assert found is not None  # written just above, in this transaction
            self._modules.transact("agent_created", tx, created)
            return found

        created = AgentSnapshot.of(row.id, row.metadata)
        started = self._write(work)
        self._modules.observe("agent_created", created)
        return started

    def get(self, session_id: str) -> SessionRecord:
        """The session (archived ones included).

        Raises:
            UnknownSessionError: no live agent has this id.
        """
        found = self._read(lambda tx: tables.read_session(tx, session_id))
        if found is None:
            raise UnknownSessionError(session_id)
        return found

    def list(
        self,
        *,
        definition_id: str | None = None,
        include_archived: bool = False,
        after: str | None = None,
        limit: int | None = None,
    ) -> builtins.list[SessionRecord]:
        """Sessions in id order: every live agent, those made without a definition included.

        Args:
            definition_id: Only the sessions pinned to a revision of this definition.
            include_archived: Include archived sessions.
            after: Start after this id (exclusive): the last id of the previous page.
            limit: At most this many (None: all).
        """
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        return self._read(
            lambda tx: tables.list_sessions(
                tx,
                definition_id=definition_id,
                include_archived=include_archived,
                after=after,
                limit=limit,
            )
        )

    def archive(self, session_id: str) -> SessionRecord:
        """Archive an idle session; archiving an archived one returns it unchanged.

        Raises:
            UnknownSessionError: no live agent has this id.
            SessionBusyError: a live turn or owed work keeps it busy (the message names
                the way out: cancel the turn, or ``settle`` the owed work).
            Exception: what a module's ``agent_archived_transact`` raised (the archival
                rolled back).
        """
        self._ownership.check(session_id)
        snapshots: list[AgentSnapshot] = []  # the one archived now, for the post-commit hook

        def work(tx: Transaction) -> SessionRecord:
            snapshots.clear()
            found = tables.read_session(tx, session_id)
            if found is None:
                raise UnknownSessionError(session_id)
            if found.archived:
                return found
            # Durable work owed (an accepted message, a turn in flight) keeps the session
            # busy whether or not an actor runs it now; the refusal names the way out.
            state = owing.busy_state(tx, session_id)
            if state is None and (
                tx.facts.read_owed(session_id) is not None or tx.queue.messages(session_id)
            ):
                state = "it owes work"
            if state is not None:
                raise SessionBusyError(session_id, state)
            tables.archive(tx, session_id, now_ms())
            archived = tables.read_session(tx, session_id)
            assert archived is not None  # read above, in this transaction
            if self._modules.overrides("agent_archived"):
                snapshot = self._modules.snapshot_in(tx, session_id)
                self._modules.transact("agent_archived", tx, snapshot)
                snapshots.append(snapshot)
            return archived

        with self._admission.operation(), self._admission.agent_operation(session_id):
            if self._is_running(session_id):
                state = self._read(lambda tx: owing.busy_state(tx, session_id))
                # Nothing durable: the actor is between a run's last commit and its stop.
                running = "its actor is still running work no turn holds: wait for it, or "
                raise SessionBusyError(session_id, state or running + owing.settle_hint(session_id))
            record = self._closed_as_agent_closed(lambda: self._store.transact(work))
        for snapshot in snapshots:
            self._modules.observe("agent_archived", snapshot)
        return record

    def settle(
        self, session_id: str, *, note: str | None = None, timeout_seconds: float | None = 30.0
    ) -> SessionRecord:
        """End the work the session owes that no live turn holds (``SessionRecord.owes``):
        a failed turn's question the runtime would still answer, or work a restart would
        resume. In one transaction a note answering the owed question is appended (a
        ``system`` message, so the conversation stays well-formed and nothing asks again),
        open tool calls are answered with an error, and the run settles; the session is then
        idle (``archive`` works). Work its actor runs for no turn is aborted first (waiting
        up to ``timeout_seconds``). A session that owes nothing is returned unchanged.

        Args:
            session_id: The session.
            note: What the note says (after "The work owed here was ended: "); a default if
                None.
            timeout_seconds: How long to wait for aborted work to stop.

        Raises:
            UnknownSessionError: no such session.
            SessionBusyError: a live turn holds the work (cancel it: ``Sessions.cancel``).
        """
        if note is not None and not isinstance(note, str):
            raise InvalidMessageError(f"note must be a string or None, got {type(note).__name__}")
        self._ownership.check(session_id)
        with self._admission.operation(), self._admission.agent_operation(session_id):
            self._require(session_id)
            if self._is_running(session_id):
                live = self._read(lambda tx: owing.live_state(tx, session_id))
                if live is not None:
                    raise SessionBusyError(session_id, live, doing="settled")
                # Work no turn holds runs now (a restart resuming a failed turn's question):
                # stop it first; the transaction below ends what it still owes.
                self._requests.abort(session_id, wait=True, timeout_seconds=timeout_seconds)
                if self._is_running(session_id):
                    state = f"its actor did not stop within {timeout_seconds} s; try again"
                    raise SessionBusyError(session_id, state, doing="settled")
            return self._closed_as_agent_closed(
                lambda: self._store.transact(lambda tx: _settle(tx, session_id, note))
            )

    # -- turns (docs/turns.md) -------------------------------------------------------------------
    def send(
        self,
        session_id: str,
        message: str | QueueableMessage | WireMessage | JSONObject,
        *,
        idempotency_key: str | None = None,
        delivery: DeliveryKind = "send",
        message_id: str | None = None,
        metadata: JSONObject | None = None,
        options: MessageOptions | None = None,
        start: bool = True,
    ) -> TurnHandle:
        """Send a message to the session as a turn; returns once it is durable.

        A ``send`` opens a new turn (queued behind the session's earlier ones); a ``steer``
        joins the running turn — it becomes part of that turn's input — or opens one when
        none runs (a session of an injected driver refuses a steer: docs/drivers.md).
        Repeating an ``idempotency_key`` returns the turn it made
        (``duplicate=True``) and writes nothing; keys are never released.

        Args:
            session_id: The session (agent).
            message: Text (a user message), the wire's ``AgentMessage`` (an
                ``agentkeep.sessions.WireMessage`` or its JSON
                ``{"role": "user", "parts": [...]}``: text, reference and data parts, kept
                verbatim) or a message (``ak.user(...)``).
            idempotency_key: Any string of 1-255 characters (no control characters),
                unique in the session; None gives the message a fresh one.
            delivery: ``send`` or ``steer``.
            message_id: The queued message's id (the id rule: 1-128 of ``[a-z0-9._-]``);
                None: a fresh one. A bad one is an ``InvalidIdError`` naming ``messageId``.
            metadata: Stored with the message.
            options: Provider/model/effort… from this message on.
            start: False only accepts it (``Acceptance.accept(start=False)``): it runs at
                the next ``open``/``start`` of the session, not now.

        Raises:
            UnknownSessionError: no such session.
            SessionArchivedError: the session is archived.
            IdempotencyConflictError: the key was used for a different input.
            InvalidMessageError: the message, its id or the key is invalid (naming it);
                ``InputTooLargeError``/``EventTooLargeError`` for one over the limits.
        """
        if delivery not in ("send", "steer"):
            raise InvalidMessageError(f'delivery must be "send" or "steer", got {delivery!r}')
        content = as_message(message)
        if message_id is not None:
            check_message_id(message_id, field="messageId")  # named as the wire names it
        with self._admission.operation():
            self._require(session_id)
            return self._turns.send(
                session_id,
                content,
                idempotency_key=idempotency_key,
                delivery=delivery,
                message_id=message_id,
                metadata=metadata,
                options=options,
                start=start,
            )

    def turn(self, session_id: str, turn_id: str) -> TurnRecord:
        """One turn of the session.

        Raises:
            UnknownSessionError: no such session.
            UnknownTurnError: the session has no such turn.
        """
        self._admission.check_open()
        return self._closed_as_agent_closed(lambda: self._turns.get(session_id, turn_id))

    def turns(
        self, session_id: str, *, after: int = 0, limit: int = 100
    ) -> builtins.list[TurnRecord]:
        """The session's turns in order, numbered above ``after``, at most ``limit`` (1..1000).

        Raises:
            UnknownSessionError: no such session.
        """
        check_page(after, limit)
        self._admission.check_open()
        return self._closed_as_agent_closed(lambda: self._turns.list(session_id, after, limit))

    def wait(
        self, session_id: str, turn_id: str, *, timeout_seconds: float | None = None
    ) -> TurnRecord:
        """Block until the turn is terminal; returns it (as it stands if the system closes).

        Raises:
            UnknownSessionError / UnknownTurnError: no such session or turn.
            TimeoutError: it is still live after ``timeout_seconds``.
        """
        self._admission.check_open()
        return self._closed_as_agent_closed(
            lambda: self._turns.wait(session_id, turn_id, timeout_seconds)
        )

    def cancel(
        self, session_id: str, turn_id: str | None = None, *, timeout_seconds: float | None = 30.0
    ) -> TurnRecord:
        """Cancel a turn: the active one (None), or the given one. A queued turn is taken out
        of the queue and ``cancelled`` at once; a running one becomes ``cancelling``
        (durably) before its work is aborted, then ``cancelled``. A terminal turn is
        returned unchanged. Turns queued behind it still run.

        Raises:
            UnknownSessionError / UnknownTurnError: no such session or turn.
            TurnStateError: ``turn_id`` is None and the session has no live turn.
        """
        self._ownership.check(session_id)
        with self._admission.operation():
            self._require(session_id)
            return self._closed_as_agent_closed(
                lambda: self._turns.cancel(session_id, turn_id, timeout_seconds)
            )

    def _require(self, session_id: str) -> None:
        if not self._read(lambda tx: tables.session_exists(tx, session_id)):
            raise UnknownSessionError(session_id)

    # -- internals -----------------------------------------------------------------------------
    @staticmethod
    def _revision(tx: Transaction, definition_id: str, revision_id: str | None) -> Revision:
        found = registry_tables.read_current(tx, definition_id)
        if found is None:
            raise UnknownDefinitionError(definition_id)
        if found[0].deleted:
            raise DefinitionDeletedError(definition_id)
        if revision_id is None:
            return found[1]
        revision = registry_tables.read_revision(tx, revision_id)
        if revision is None or revision.definition_id != definition_id:
            raise UnknownRevisionError(f'"{revision_id}" of definition "{definition_id}"')
        return revision

    def _write(self, work: Callable[[Transaction], T]) -> T:
        with self._admission.operation():
            return self._closed_as_agent_closed(lambda: self._store.transact(work))

    def _read(self, work: Callable[[Transaction], T]) -> T:
        self._admission.check_open()
        return self._closed_as_agent_closed(lambda: self._store.read(work))

    @staticmethod
    def _closed_as_agent_closed(call: Callable[[], T]) -> T:
        try:
            return call()
        except StoreClosedError:
            raise AgentClosedError("The agent system has been closed.") from None


def _settle(tx: Transaction, session_id: str, note: str | None) -> SessionRecord:
    """``Sessions.settle``'s transaction: refused while a live turn holds the work."""
    if tables.read_session(tx, session_id) is None:
        raise UnknownSessionError(session_id)
    live = owing.live_state(tx, session_id)
    if live is not None:
        raise SessionBusyError(session_id, live, doing="settled")
    owed_ending.end_owed(tx, session_id, note)
    settled = tables.read_session(tx, session_id)
    assert settled is not None  # read above, in this transaction
    return settled
