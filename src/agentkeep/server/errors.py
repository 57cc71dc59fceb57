"""Every refusal of the REST surface as the error envelope of docs/daemon.md, with a fitting status.

The invariant: bad input and a configuration problem never become a 500. A request the
server cannot take is an :class:`ApiError` (raised by the request parsing helpers), and
every library error (every :class:`~agentkeep.errors.AgentkeepError`) is mapped by
:func:`from_library` to a 4xx (or a 502/503/504 when the store, the runtime or a wait
cannot answer now) by its code (:data:`STATUS_OF_CODE`); only an exception that is not a
library error (a bug) is a 500, and its message says nothing of the internals.
The ``code`` on the wire is the library error's own stable ``code`` (``unknown_session``,
``definition_exists``, …), so a client can branch on it; ``docs/daemon.md`` lists them.
"""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.responses import Response

from agentkeep.errors import AgentkeepError
from agentkeep.server.wire import ErrorBody, ErrorEnvelope

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


# The status of each library error code: an error takes the status of the first class in
# its MRO whose own ``code`` is listed (a subclass without an entry takes its parent's).
# Every error class agentkeep defines has its code here, and docs/daemon.md lists each code
# in its status's row (tests/unit/server/test_error_mapping.py walks every subclass of
# AgentkeepError and drives every route with each). Codes, not classes, so the surfaces
# above the server (MCP, the client) are covered without importing them.
STATUS_OF_CODE: dict[str, int] = {
    # 404: no such record.
    **dict.fromkeys(
        ("unknown_definition", "unknown_revision", "unknown_agent", "unknown_session"), 404
    ),
    "unknown_turn": 404,
    "unknown_feature": 404,
    # 409: a conflict with the current state of the session, turn or runtime.
    **dict.fromkeys(
        (
            "definition_exists",
            "agent_exists",
            "session_busy",
            "session_archived",
            "turn_state",
            "compaction_failed",
            "await_from_own_loop",
            "provider_session_busy",
            "provider_session_closed",
            "expired_scope",
            "transaction_scope",
            "store_constraint",
            "session_mismatch",
            "cancelled",
            "driver_context_closed",
        ),
        409,
    ),
    # 410: a tombstone.
    "definition_deleted": 410,
    # 421: a write for a partition this worker does not own (a store divided into
    # partitions): the request reached the wrong worker, not a conflict with the resource's
    # state — the same request to the partition's owner succeeds (nothing was written here).
    "not_owner": 421,
    # 422: input or configuration the library refuses (details.field names it when it can).
    **dict.fromkeys(
        (
            "agentkeep_error",
            "invalid_definition",
            "registry_error",
            "invalid_session_config",
            "unsupported_driver",
            "invalid_driver_spec",
            "session_error",
            "invalid_config",
            "invalid_id",
            "model_not_served",
            "invalid_message",
            "event_too_large",
            "input_too_large",
            "idempotency_conflict",
            "provider_error",
            "unknown_provider",
            "provider_unavailable",
            "credential_unavailable",
            "missing_extra",
            "duplicate_provider",
            "driver_error",
            "process_driver_error",
            "invalid_event",
            "tool_definition",
            "tool_commit",
            "feature_definition",
            "module_migration_failed",
            "module_start_failed",
            "daemon_config",
            "mcp_tool_error",
            "invalid_arguments",
        ),
        422,
    ),
    # 502: a daemon this one relies on failed (the client's errors).
    **dict.fromkeys(("daemon_error", "daemon_unreachable"), 502),
    # 503: the system is closing, or its store or runtime cannot answer now.
    **dict.fromkeys(
        (
            "agent_closed",
            "store_error",
            "store_closed",
            "store_locked",
            "store_unavailable",
            "store_ownership_lost",
            "no_store",
            "store_not_writable",
            "store_replaced",
            "store_damaged",
            "store_directory",
            "schema_too_new",
            "schema_too_old",
            "commit_outcome_unknown",
            "read_only_transaction",
            "injected_fault",
            "injected_writer_crash",
            "supervision_error",
            "supervisor_gave_up",
            "supervisor_stopped",
            "supervision_deadlock",
            "unknown_child",
            "duplicate_child",
            "child_start_failed",
        ),
        503,
    ),
    # 504: a wait ran out.
    "timeout": 504,
}

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
    "provider_id",
    "driver_id",
    "partition",
)


def status_of(kind: type[AgentkeepError]) -> int | None:
    """The status of errors of class ``kind`` (:data:`STATUS_OF_CODE`), None if no class of
    its MRO has a listed code."""
    for each in kind.__mro__:
        code = vars(each).get("code")
        if isinstance(code, str) and code in STATUS_OF_CODE:
            return STATUS_OF_CODE[code]
    return None


def from_library(error: AgentkeepError) -> ApiError:
    """The wire form of a library error: its status, its own ``code``, its message and its
    safe details (500 only for an error class outside agentkeep with no listed parent)."""
    status = status_of(type(error))
    if status is None:
        return ApiError(500, "internal_error", "The server failed to handle the request.")
    details = {name: getattr(error, name) for name in _DETAILS if hasattr(error, name)}
    return ApiError(status, error.code, str(error), details)


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
    """``body`` encoded with msgspec (the wire's names come from the struct)."""
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
