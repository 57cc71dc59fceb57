"""What the MCP tools need from agentkeep: the :class:`Backend` protocol, and
:class:`SystemBackend`, its implementation over an ``AgentSystem`` the server owns.

The tools (:mod:`agentkeep.mcp.tools`) and the CLI's commands call only this protocol; its
other implementation, :class:`agentkeep.client.HttpBackend`, is a client of the daemon's
REST API, used when a daemon owns the home. An implementation raises the library's errors
(:class:`~agentkeep.errors.AgentkeepError` subclasses, ``TimeoutError``) for everything a
caller can get wrong; the server turns them into tool errors the model reads.

Every method blocks (the store and the actors are synchronous); the server calls them from a
worker thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from typing import Protocol

from agentkeep.agent_system import AgentSystem
from agentkeep.agent_system.compaction import Compaction, compact_now
from agentkeep.delivery import DeliveryKind
from agentkeep.mcp.types import AgentMessage, require_content
from agentkeep.registry import DefinitionRecord, DefinitionUpdate
from agentkeep.sessions import SessionRecord
from agentkeep.types import JSONObject, MessageOptions, SessionEvent
from agentkeep.types.parts import WireMessage
from agentkeep.types.turns import TERMINAL_STATUSES, TURN_EVENT_PREFIX, SentTurn, TurnRecord


class Backend(Protocol):
    """The operations behind the MCP tools (the wire's ``Agents`` service, as far as MCP
    uses it). Definitions are passed as the wire's JSON objects, so they are checked (and
    refused, naming the field) exactly once, by the registry."""

    def list_definitions(
        self, *, include_deleted: bool, after: str | None, limit: int
    ) -> list[DefinitionRecord]:
        """Definitions in id order after ``after``, at most ``limit``."""
        ...

    def get_definition(self, definition_id: str, *, include_deleted: bool) -> DefinitionRecord:
        """One definition (``UnknownDefinitionError``, ``DefinitionDeletedError``)."""
        ...

    def create_definition(self, definition: JSONObject) -> DefinitionRecord:
        """Create (``InvalidDefinitionError``, ``DefinitionExistsError``)."""
        ...

    def update_definition(self, definition_id: str, patch: JSONObject) -> DefinitionUpdate:
        """PATCH (``InvalidDefinitionError``, ``UnknownDefinitionError``, …)."""
        ...

    def delete_definition(self, definition_id: str) -> DefinitionRecord:
        """Tombstone (``UnknownDefinitionError``)."""
        ...

    def start_session(
        self,
        definition_id: str,
        *,
        session_id: str | None,
        metadata: JSONObject | None,
        revision_id: str | None = None,
    ) -> SessionRecord:
        """Start a session of the definition's current revision, or ``revision_id``
        (``AgentExistsError`` if
        ``session_id`` is taken; the refusals of ``Sessions.start``)."""
        ...

    def get_session(self, session_id: str) -> SessionRecord:
        """One session (``UnknownSessionError``)."""
        ...

    def list_sessions(
        self,
        *,
        definition_id: str | None,
        include_archived: bool,
        after: str | None,
        limit: int,
    ) -> list[SessionRecord]:
        """Sessions in id order after ``after`` (of one definition if ``definition_id``)."""
        ...

    def archive_session(self, session_id: str) -> SessionRecord:
        """Archive (``SessionBusyError`` while a turn is live or work is owed)."""
        ...

    def settle_session(self, session_id: str, *, note: str | None = None) -> SessionRecord:
        """End the work owed that no live turn holds (``Sessions.settle``;
        ``SessionBusyError`` while a live turn holds it)."""
        ...

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
        """Accept a message as a turn, durably (``SessionArchivedError``,
        ``IdempotencyConflictError``, ``InvalidMessageError``, ``UnknownSessionError``;
        ``InvalidConfigError``/``ModelNotServedError`` for ``options`` naming a provider or
        model that cannot take it). ``message_id``: the message's id (resending it is a
        no-op, ``duplicate``); ``options``: the provider/model from this message on."""
        ...

    def wait_turn(self, session_id: str, turn_id: str, *, timeout_seconds: float) -> TurnRecord:
        """The turn once terminal (``TimeoutError`` if it is still live by then)."""
        ...

    def get_turn(self, session_id: str, turn_id: str) -> TurnRecord:
        """One turn (``UnknownTurnError``)."""
        ...

    def turns(self, session_id: str, *, after: int, limit: int) -> list[TurnRecord]:
        """The session's turns numbered above ``after``."""
        ...

    def events(self, session_id: str, *, after: int, limit: int) -> list[SessionEvent]:
        """The session's ledger after sequence ``after``."""
        ...

    def follow(
        self,
        session_id: str,
        *,
        after: int,
        turn_id: str | None = None,
        idle_seconds: float | None = None,
    ) -> Generator[SessionEvent | None, None, None]:
        """The ledger after ``after``, then each event as it commits; with ``turn_id`` only
        that turn's events, ending after its terminal ``turn.*`` event (the daemon's SSE
        stream with ``until_turn_end``). With ``idle_seconds``, ``None`` is yielded once that
        long passed since the last thing yielded (a tick: the caller may give up, show
        progress, or go on iterating); without it, only events are yielded."""
        ...

    def cancel_turn(self, session_id: str, turn_id: str | None) -> TurnRecord:
        """Cancel the active turn or ``turn_id`` (``TurnStateError`` if none is live)."""
        ...

    def compact(self, session_id: str, *, timeout_seconds: float) -> Compaction:
        """Compact the session's context now and wait for it (``CompactionFailedError``;
        ``TimeoutError`` if it is not done by then: it goes on)."""
        ...


class SystemBackend(Backend):
    """:class:`Backend` over an ``AgentSystem`` this process owns (the store's owner).

    Args:
        system: The open system; the caller closes it.
        cancel_timeout_seconds: How long a cancel waits for a running turn's work to stop.
        run_sends: Run a sent turn now (the default). False only accepts it, durably: it
            runs at the next start of the store (``agentkeep resume``), as a command that
            does not wait for its turn and owns the store only until it exits leaves it.
    """

    def __init__(
        self,
        system: AgentSystem,
        *,
        cancel_timeout_seconds: float = 30.0,
        run_sends: bool = True,
    ) -> None:
        self._system = system
        self._cancel_timeout = cancel_timeout_seconds
        self._run_sends = run_sends

    def list_definitions(
        self, *, include_deleted: bool, after: str | None, limit: int
    ) -> list[DefinitionRecord]:
        return self._system.registry.list(include_deleted=include_deleted, after=after, limit=limit)

    def get_definition(self, definition_id: str, *, include_deleted: bool) -> DefinitionRecord:
        return self._system.registry.get(definition_id, include_deleted=include_deleted)

    def create_definition(self, definition: JSONObject) -> DefinitionRecord:
        return self._system.registry.create(definition)

    def update_definition(self, definition_id: str, patch: JSONObject) -> DefinitionUpdate:
        return self._system.registry.update(definition_id, patch)

    def delete_definition(self, definition_id: str) -> DefinitionRecord:
        return self._system.registry.delete(definition_id)

    def start_session(
        self,
        definition_id: str,
        *,
        session_id: str | None,
        metadata: JSONObject | None,
        revision_id: str | None = None,
    ) -> SessionRecord:
        return self._system.sessions.start(
            definition_id, revision_id=revision_id, id=session_id, metadata=metadata
        )

    def get_session(self, session_id: str) -> SessionRecord:
        return self._system.sessions.get(session_id)

    def list_sessions(
        self,
        *,
        definition_id: str | None,
        include_archived: bool,
        after: str | None,
        limit: int,
    ) -> list[SessionRecord]:
        return self._system.sessions.list(
            definition_id=definition_id,
            include_archived=include_archived,
            after=after,
            limit=limit,
        )

    def archive_session(self, session_id: str) -> SessionRecord:
        return self._system.sessions.archive(session_id)

    def settle_session(self, session_id: str, *, note: str | None = None) -> SessionRecord:
        return self._system.sessions.settle(
            session_id, note=note, timeout_seconds=self._cancel_timeout
        )

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
        handle = self._system.sessions.send(
            session_id,
            wire_message(message),
            delivery=delivery,
            idempotency_key=idempotency_key,
            metadata=metadata,
            message_id=message_id,
            options=options,
            start=self._run_sends,
        )
        return SentTurn(turn=handle.turn, duplicate=handle.duplicate)

    def wait_turn(self, session_id: str, turn_id: str, *, timeout_seconds: float) -> TurnRecord:
        return self._system.sessions.wait(session_id, turn_id, timeout_seconds=timeout_seconds)

    def get_turn(self, session_id: str, turn_id: str) -> TurnRecord:
        return self._system.sessions.turn(session_id, turn_id)

    def turns(self, session_id: str, *, after: int, limit: int) -> list[TurnRecord]:
        return self._system.sessions.turns(session_id, after=after, limit=limit)

    def events(self, session_id: str, *, after: int, limit: int) -> list[SessionEvent]:
        self._system.sessions.get(session_id)  # an unknown session is an error, not []
        return self._system.events(session_id, after=after, limit=limit)

    def follow(
        self,
        session_id: str,
        *,
        after: int,
        turn_id: str | None = None,
        idle_seconds: float | None = None,
    ) -> Generator[SessionEvent | None, None, None]:
        subscription = self._system.subscribe(session_id, after=after)
        try:
            yield from ticking(subscription.next, turn_id=turn_id, idle_seconds=idle_seconds)
        finally:
            subscription.close()

    def cancel_turn(self, session_id: str, turn_id: str | None) -> TurnRecord:
        return self._system.sessions.cancel(
            session_id, turn_id, timeout_seconds=self._cancel_timeout
        )

    def compact(self, session_id: str, *, timeout_seconds: float) -> Compaction:
        return compact_now(self._system, session_id, timeout_seconds=timeout_seconds)


def ticking(
    next_event: Callable[[float | None], SessionEvent],
    *,
    turn_id: str | None,
    idle_seconds: float | None,
) -> Generator[SessionEvent | None, None, None]:
    """:meth:`Backend.follow` over ``next_event`` (an event, waiting at most the given
    seconds: ``TimeoutError`` when none came, ``StopIteration`` once the source closed):
    the turn's events only (ending after its terminal event) when ``turn_id``, and a
    ``None`` tick each time ``idle_seconds`` passed since the last thing yielded."""
    quiet_since = time.monotonic()
    while True:
        wait = None
        if idle_seconds is not None:
            wait = max(0.0, quiet_since + idle_seconds - time.monotonic())
        try:
            event = next_event(wait)
        except TimeoutError:
            yield None
            quiet_since = time.monotonic()
            continue
        except StopIteration:
            return
        if turn_id is not None and event.turn_id != turn_id:
            continue
        yield event
        quiet_since = time.monotonic()
        if turn_id is not None and ends_turn(event):
            return


def ends_turn(event: SessionEvent) -> bool:
    """A ``turn.<status>`` event moving its turn to a terminal status."""
    prefix, _, status = event.type.partition(".")
    return f"{prefix}." == TURN_EVENT_PREFIX and status in TERMINAL_STATUSES


def wire_message(message: str | AgentMessage) -> str | WireMessage:
    """A tool's message as ``Sessions.send`` (and the daemon's REST API) takes it: text, or
    the wire's ``AgentMessage`` with every part kept verbatim.

    Raises:
        InvalidMessageError: the message is empty.
    """
    require_content(message)
    return message if isinstance(message, str) else message.wire()
