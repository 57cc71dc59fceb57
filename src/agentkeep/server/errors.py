"""Every refusal of the REST surface as seed 002's error envelope, with a fitting status.

The invariant: bad input never becomes a 500. A request the server cannot take is an
:class:`ApiError` (raised by the request parsing helpers), and every library error a route
can meet is mapped by :func:`from_library` to a 4xx (or a 503 while the system is closing);
only an error nobody anticipated is a 500, and its message says nothing of the internals.
The ``code`` on the wire is the library error's own stable ``code`` (``unknown_session``,
``definition_exists``, …), so a client can branch on it; ``docs/daemon.md`` lists them.
"""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.responses import Response

from agentkeep.errors import (
    AgentClosedError,
    AgentExistsError,
    AgentkeepError,
    CommitOutcomeUnknownError,
    CompactionFailedError,
    InvalidConfigError,
    InvalidMessageError,
    SessionArchivedError,
    StoreUnavailableError,
    TurnStateError,
    UnknownAgentError,
)
from agentkeep.registry import (
    DefinitionDeletedError,
    DefinitionExistsError,
    InvalidDefinitionError,
    UnknownDefinitionError,
    UnknownRevisionError,
)
from agentkeep.server.wire import ErrorBody, ErrorEnvelope
from agentkeep.sessions import SessionBusyError, SessionConfigError, UnknownTurnError

_encoder = msgspec.json.Encoder()


class ApiError(Exception):
    """A request the server refuses: its status, stable code, message and details."""

    def __init__(
        self, status: int, code: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}


# Most specific first: the first class an error is an instance of decides its status.
_STATUS: tuple[tuple[type[AgentkeepError], int], ...] = (
    (DefinitionDeletedError, 410),
    (UnknownDefinitionError, 404),
    (UnknownRevisionError, 404),
    (UnknownAgentError, 404),  # UnknownSessionError included
    (UnknownTurnError, 404),
    (DefinitionExistsError, 409),
    (AgentExistsError, 409),
    (SessionBusyError, 409),
    (SessionArchivedError, 409),
    (TurnStateError, 409),
    (CompactionFailedError, 409),
    (InvalidDefinitionError, 422),
    (SessionConfigError, 422),  # UnsupportedDriverError included
    (InvalidConfigError, 422),  # ModelNotServedError included
    (InvalidMessageError, 422),  # EventTooLarge, InputTooLarge, IdempotencyConflict
    (AgentClosedError, 503),
    (StoreUnavailableError, 503),
    (CommitOutcomeUnknownError, 503),
)

# Attributes of library errors that are safe and useful to show as details.
_DETAILS = (
    "field",
    "deleted",
    "definition_id",
    "session_id",
    "agent_id",
    "turn_id",
    "key",
    "size",
    "limit",
)


def from_library(error: AgentkeepError) -> ApiError:
    """The wire form of a library error (500 for one no route should meet)."""
    for kind, status in _STATUS:
        if isinstance(error, kind):
            details = {name: getattr(error, name) for name in _DETAILS if hasattr(error, name)}
            return ApiError(status, error.code, str(error), details)
    return ApiError(500, "internal_error", "The server failed to handle the request.")


def error_response(error: ApiError, headers: dict[str, str] | None = None) -> Response:
    """The envelope ``{"error": {"code", "message", "details"}}`` with the error's status."""
    body = ErrorEnvelope(
        error=ErrorBody(code=error.code, message=error.message, details=error.details)
    )
    return Response(
        _encoder.encode(body),
        status_code=error.status,
        media_type="application/json",
        headers=headers,
    )


def json_response(
    body: msgspec.Struct, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    """``body`` encoded with msgspec (seed 002's names come from the struct)."""
    return Response(
        _encoder.encode(body), status_code=status, media_type="application/json", headers=headers
    )


def unauthorized() -> ApiError:
    """The canonical 401: the same for a missing, malformed or wrong token."""
    return ApiError(
        401,
        "unauthorized",
        "A valid token is required: send it as 'Authorization: Bearer <token>' or in the "
        "'x-amalgm-runtime-token' header.",
    )
