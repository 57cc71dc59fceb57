"""The daemon's JSON back into the library's records, and its errors back into the
library's error classes.

The inverse of :mod:`agentkeep.server.wire` and :mod:`agentkeep.server.turn_wire`, so a
command shows exactly the same JSON whether it read the store itself or asked the daemon:
``wire(decode(wire(record))) == wire(record)`` (timestamps carry milliseconds both ways; a
turn's input and result, and an event's data, are kept as the wire shows them: showing them
again changes nothing). What the wire does not carry (a turn's ``message_id``) is left at
its default; nothing shown depends on it.
"""

from __future__ import annotations

import contextlib
import datetime
from typing import Any

import msgspec

from agentkeep.errors import AgentkeepError
from agentkeep.registry import Definition, DefinitionRecord
from agentkeep.sessions import SessionOwes, SessionRecord
from agentkeep.types import JSONObject, SessionEvent
from agentkeep.types.turns import TurnFailure, TurnRecord


def ms(value: str) -> int:
    """The wire's ISO timestamp as milliseconds since the epoch (the inverse of ``iso``)."""
    moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return round(moment.timestamp() * 1000)


def ms_or_none(value: str | None) -> int | None:
    """:func:`ms`, keeping None."""
    return None if value is None else ms(value)


def definition_record(body: JSONObject) -> DefinitionRecord:
    """An ``AgentRecord`` as the registry's record."""
    return DefinitionRecord(
        id=body["id"],
        current_revision_id=body["currentRevisionId"],
        current_revision=body["currentRevision"],
        hash=body["hash"],
        definition=msgspec.convert(body["definition"], Definition),
        created_at_ms=ms(body["createdAt"]),
        updated_at_ms=ms(body["updatedAt"]),
        deleted_at_ms=ms_or_none(body.get("deletedAt")),
    )


def session_record(body: JSONObject) -> SessionRecord:
    """An ``AgentSession`` as the sessions' record."""
    return SessionRecord(
        id=body["id"],
        definition_id=body.get("agentId"),
        revision_id=body.get("agentRevisionId"),
        revision_number=body.get("agentRevision"),
        status=body["status"],
        driver_session_id=body.get("driverSessionId"),
        metadata=body.get("metadata") or {},
        created_at_ms=ms(body["createdAt"]),
        updated_at_ms=ms(body["updatedAt"]),
        archived_at_ms=ms_or_none(body.get("archivedAt")),
        owes=None if body.get("owes") is None else msgspec.convert(body["owes"], SessionOwes),
    )


def turn_record(body: JSONObject) -> TurnRecord:
    """An ``AgentTurn`` as the turns' record."""
    error = body.get("error")
    return TurnRecord(
        id=body["id"],
        session_id=body["sessionId"],
        number=body["number"],
        idempotency_key=body["idempotencyKey"],
        driver=body["driver"],
        status=body["status"],
        input=body["input"],  # a wire AgentMessage, as the library stores it
        result=body.get("result"),
        error=None if error is None else msgspec.convert(error, TurnFailure),
        created_at_ms=ms(body["createdAt"]),
        started_at_ms=ms_or_none(body.get("startedAt")),
        completed_at_ms=ms_or_none(body.get("completedAt")),
    )


def session_event(body: JSONObject) -> SessionEvent:
    """A ``SessionEvent`` as the ledger's."""
    return SessionEvent(
        session_id=body["sessionId"],
        sequence=body["sequence"],
        type=body["type"],
        data=body.get("data") or {},
        created_at_ms=ms(body["createdAt"]),
        turn_id=body.get("turnId"),
    )


def _error_classes(root: type[AgentkeepError]) -> dict[str, type[AgentkeepError]]:
    found: dict[str, type[AgentkeepError]] = {}
    pending = [root]
    while pending:
        kind = pending.pop()
        pending.extend(kind.__subclasses__())
        # The most general class of a code wins (subclasses may repeat a parent's code).
        found.setdefault(kind.code, kind)
    return found


class DaemonError(AgentkeepError):
    """The daemon refused a request with a code no library error has (``unauthorized``,
    ``misdirected_request``, ``internal_error``, …); ``status`` is the HTTP status."""

    code = "daemon_error"

    def __init__(self, status: int, code: str, message: str, details: JSONObject) -> None:
        super().__init__(message)
        self.status = status
        self.code = code  # the envelope's own code, shown as is
        self.details = details


def library_error(status: int, envelope: Any) -> AgentkeepError:
    """The daemon's error envelope as the library error of the same ``code`` (the daemon
    puts each library error's own code on the wire), carrying its message and details, so
    a caller handles it exactly as if the library had raised it here."""
    body = envelope.get("error") if isinstance(envelope, dict) else None
    if not isinstance(body, dict):
        return DaemonError(status, "bad_response", f"The daemon answered {status}.", {})
    code = str(body.get("code", "daemon_error"))
    message = str(body.get("message", ""))
    raw = body.get("details")
    details: JSONObject = raw if isinstance(raw, dict) else {}
    kind = _error_classes(AgentkeepError).get(code)
    if kind is None or kind is AgentkeepError:
        return DaemonError(status, code, message, details)
    # Built without its own __init__ (their signatures differ): the message is the daemon's
    # str(error), and the details are the attributes the server took from the original.
    error = kind.__new__(kind)
    Exception.__init__(error, message)
    for name, value in details.items():
        with contextlib.suppress(AttributeError):  # a read-only property keeps its own
            setattr(error, name, value)
    return error
