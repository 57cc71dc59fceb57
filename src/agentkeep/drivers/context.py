"""What a running driver is handed: its cancel signal, ``emit`` and ``delta`` (docs/drivers.md).

Invariants:

- ``emit`` returns only once its event is committed (through the store's writer, by a
  function the runner gives the context: the driver never holds a store handle).
- Once the context is closed (the run returned, raised, timed out, was abandoned, or emitted
  something invalid), nothing more is written: ``emit`` raises
  :class:`~agentkeep.drivers.errors.DriverContextClosedError`. Closing waits for an ``emit``
  already committing, so no event of a run ever lands after its turn's terminal event.
- An invalid event is refused before anything is written, and fails the turn
  (``invalid_event``): the context closes and tells the runner.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from agentkeep.drivers.errors import (
    DriverCancelledError,
    DriverContextClosedError,
    InvalidDriverEventError,
)
from agentkeep.persistence.ledger import encode_event_data
from agentkeep.providers.credentials import Credential, CredentialResolver
from agentkeep.providers.credentials import resolve as resolve_credential
from agentkeep.types import JSONObject, SessionEvent
from agentkeep.types.ledger import EVENT_TYPES, MESSAGE, TEXT_DELTA
from agentkeep.types.parts import as_wire_json, decode_message
from agentkeep.types.turns import TURN_EVENT_PREFIX

#: Commits one validated event of the turn and returns it (given by the runner).
Commit = Callable[[str, JSONObject], SessionEvent]
#: Hands one ephemeral event to the session's live subscribers (given by the runner).
Publish = Callable[[str, JSONObject], SessionEvent]

_RESERVED = frozenset(EVENT_TYPES) - {MESSAGE}


def check_assistant_message(message: object, what: str) -> JSONObject:
    """``message`` as the wire's assistant ``AgentMessage`` (``{"role": "assistant",
    "parts": [...]}``), as plain JSON. A message of content blocks (``{"role":
    "assistant", "content": [...]}``, agentkeep's earlier form) is converted to parts
    (``types/parts.py``).

    Raises:
        InvalidDriverEventError: naming what is wrong, ``what`` naming where it came from.
    """
    if not isinstance(message, dict):
        raise InvalidDriverEventError(
            f"{what} must be an assistant message object, got {type(message).__name__}"
        )
    if message.get("role") != "assistant":
        raise InvalidDriverEventError(
            f'{what} must have role "assistant", got {message.get("role")!r}'
        )
    if "parts" not in message:
        content = message.get("content")
        if not isinstance(content, list) or not all(
            isinstance(block, dict) and isinstance(block.get("type"), str) for block in content
        ):
            raise InvalidDriverEventError(
                f'{what} must have a "parts" list (seed 002\'s AgentMessage: text, reference '
                "and data parts)"
            )
        message = as_wire_json(message)
    try:
        wire = decode_message(message)
    except msgspec.ValidationError as error:
        raise InvalidDriverEventError(f"{what} is not an AgentMessage: {error}") from None
    return as_json(msgspec.to_builtins(wire), what)


def as_json(data: object, what: str) -> JSONObject:
    """``data`` as a plain JSON object (encoded and decoded once).

    Raises:
        InvalidDriverEventError: it is not a JSON object, or does not encode as JSON.
    """
    if not isinstance(data, dict):
        raise InvalidDriverEventError(f"{what} must be a JSON object, got {type(data).__name__}")
    try:
        decoded = msgspec.json.decode(encode_event_data(data))
    except (TypeError, ValueError, msgspec.EncodeError) as error:
        raise InvalidDriverEventError(f"{what} is not JSON: {error}") from None
    if not isinstance(decoded, dict):  # pragma: no cover - a dict encodes as an object
        raise InvalidDriverEventError(f"{what} must be a JSON object")
    return decoded


def check_event(type: object, data: object, max_event_bytes: int) -> tuple[str, JSONObject]:
    """The event a driver's ``emit(type, data)`` appends: ``(type, stored data)``.

    ``message`` carries an assistant ``AgentMessage`` and is stored as ``{"role":
    "assistant", "message": <it>}`` (the native ``message`` event's shape); any other type
    is the driver's own, stored as given.

    Raises:
        InvalidDriverEventError: naming what is wrong (nothing is written).
    """
    if not isinstance(type, str) or not type.strip():
        raise InvalidDriverEventError(f"an event type must be a non-empty string, got {type!r}")
    if type.startswith(TURN_EVENT_PREFIX):
        raise InvalidDriverEventError(
            f'event type "{type}" is reserved: "turn.*" events are agentkeep\'s turn states'
        )
    if type in _RESERVED:
        raise InvalidDriverEventError(
            f'event type "{type}" is reserved: it is one of agentkeep\'s own event types '
            f"({sorted(_RESERVED)}); name driver events differently"
        )
    what = f'the data of a "{type}" event'
    if type == MESSAGE:
        stored: JSONObject = {
            "role": "assistant",
            "message": check_assistant_message(data, what),
        }
    else:
        stored = as_json(data, what)
    size = len(encode_event_data(stored).encode())
    if size > max_event_bytes:
        raise InvalidDriverEventError(
            f"{what} is {size} bytes encoded, over max_event_bytes ({max_event_bytes})"
        )
    return type, stored


def _is_text(value: object) -> bool:
    return isinstance(value, str)


class DriverSignal:
    """A run's cancel signal, as the wire's ``context.signal`` (an ``AbortSignal``) in
    Python: ``aborted``, ``reason``, ``throw_if_aborted()`` and ``wait(timeout)``. It fires
    on a cancel (after the intent is durable), at the turn timeout and when the system
    closes."""

    def __init__(self, context: DriverContext) -> None:
        self._context = context

    @property
    def aborted(self) -> bool:
        """True once the signal fired."""
        return self._context.cancelled

    @property
    def reason(self) -> str:
        """Why it fired (``""`` until it did)."""
        return self._context.cancel_reason

    def throw_if_aborted(self) -> None:
        """Raise :class:`DriverCancelledError` if the signal fired (``throwIfAborted``)."""
        self._context.raise_if_cancelled()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the signal fires (True) or ``timeout`` seconds pass (False)."""
        return self._context.wait_cancelled(timeout)


class DriverContext:
    """One run's context (the wire's ``DriverRunContext``): a cancel signal, ``emit`` (a
    durable event of the turn, committed before it returns) and ``delta`` (ephemeral text
    for live subscribers). Thread-safe; see the module's invariants.

    Made by the runner, never by a driver.
    """

    def __init__(
        self,
        *,
        session_id: str,
        turn_id: str,
        commit: Commit,
        publish: Publish,
        max_event_bytes: int,
        on_invalid: Callable[[InvalidDriverEventError], None],
        auth_ref: str | None = None,
        credentials: CredentialResolver | None = None,
    ) -> None:
        self.session_id = session_id
        self._auth_ref = auth_ref
        self._credentials = credentials
        self.turn_id = turn_id
        self._commit = commit
        self._publish = publish
        self._max_event_bytes = max_event_bytes
        self._on_invalid = on_invalid
        self._cancel = threading.Event()
        self._cancel_reason = ""
        self._lock = threading.Lock()  # held by an emit while it commits, and by close
        self._open = True

    # -- the cancel signal -------------------------------------------------------------------
    @property
    def signal(self) -> DriverSignal:
        """The cancel signal as the wire's drivers use it (``context.signal``)."""
        return DriverSignal(self)

    @property
    def cancelled(self) -> bool:
        """True once the turn was cancelled, timed out or the system is stopping."""
        return self._cancel.is_set()

    @property
    def cancel_reason(self) -> str:
        """Why the signal fired (``""`` until it did)."""
        return self._cancel_reason

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Block until the signal fires (True) or ``timeout`` seconds pass (False)."""
        return self._cancel.wait(timeout)

    def raise_if_cancelled(self) -> None:
        """Raise :class:`DriverCancelledError` if the signal fired."""
        if self._cancel.is_set():
            raise DriverCancelledError(
                f'Turn "{self.turn_id}" was stopped: {self._cancel_reason or "cancelled"}.'
            )

    # -- the session's credential ------------------------------------------------------------
    def credential(self) -> Credential | None:
        """The credential the pinned revision's ``authRef`` names, resolved now by the
        system's credential resolver (``AgentSystem.open(credentials=...)``), as the native
        loop resolves it for its requests; None when the revision has no ``authRef``. Keep
        the secret in memory: never emit it, return it or log it.

        Raises:
            CredentialUnavailableError: the reference cannot be resolved (naming it).
        """
        if self._auth_ref is None:
            return None
        return resolve_credential(self._credentials, self._auth_ref)

    # -- events ------------------------------------------------------------------------------
    def emit(self, type: str | Mapping[str, Any], data: JSONObject | None = None) -> SessionEvent:
        """Commit an event of the turn to the session's ledger and return it.

        Called as ``emit(type, data)`` or, as the wire's drivers do, with one event
        ``emit({"type": ..., "data": {...}})`` (``data`` defaults to ``{}``). ``type`` is
        the driver's own (not ``turn.*``, not one of agentkeep's event types), or
        ``message`` with an assistant ``AgentMessage`` as ``data``. ``text.delta`` with
        ``{"text": ...}`` is the wire's streamed text: it is the same as :meth:`delta`
        (ephemeral, not stored; the returned event has ``sequence == 0``).

        Raises:
            InvalidDriverEventError: the event is refused (the turn fails ``invalid_event``).
            DriverContextClosedError: the run is over; nothing is written.
        """
        kind: object = type
        if isinstance(type, Mapping):
            kind, data = type.get("type"), type.get("data", {} if data is None else data)
        elif data is None:
            data = {}
        if kind == TEXT_DELTA:
            text = data.get("text") if isinstance(data, dict) else None
            return self.delta(text)  # type: ignore[arg-type]  # checked there
        with self._lock:
            if not self._open:
                raise self._closed()
            try:
                checked_type, stored = check_event(kind, data, self._max_event_bytes)
            except InvalidDriverEventError as error:
                self._open = False
                self._on_invalid(error)
                raise
            return self._commit(checked_type, stored)

    def delta(self, text: str) -> SessionEvent:
        """Hand streamed text to the session's live subscribers (``text.delta``, ephemeral:
        not stored, no sequence, never replayed).

        Raises:
            InvalidDriverEventError: ``text`` is not a string (the turn fails).
            DriverContextClosedError: the run is over.
        """
        with self._lock:
            if not self._open:
                raise self._closed()
            if not _is_text(text):  # a caller without a type checker
                self._open = False
                error = InvalidDriverEventError(
                    f"a text delta must be a string, got {type(text).__name__}"
                )
                self._on_invalid(error)
                raise error
        return self._publish(TEXT_DELTA, {"text": text})

    # -- the runner's side -------------------------------------------------------------------
    def fire(self, reason: str) -> None:
        """Fire the cancel signal (the runner does, after the intent is durable)."""
        if not self._cancel.is_set():
            self._cancel_reason = reason
            self._cancel.set()

    def close(self) -> None:
        """Refuse every later emit; waits for one already committing."""
        with self._lock:
            self._open = False

    def _closed(self) -> DriverContextClosedError:
        return DriverContextClosedError(
            f'Turn "{self.turn_id}" is over (its run returned, failed, timed out or was '
            "abandoned): nothing more is written for it."
        )


__all__ = [
    "DriverContext",
    "DriverSignal",
    "as_json",
    "check_assistant_message",
    "check_event",
]
