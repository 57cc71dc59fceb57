"""How a driver turn ends: the transaction that ends it after its run (:func:`end_turn`), the
check of what ``run`` returned, and the failures a turn ends with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from agentkeep.drivers.context import as_json, check_assistant_message
from agentkeep.drivers.errors import InvalidDriverEventError
from agentkeep.drivers.types import DriverResult
from agentkeep.persistence.codec import now_ms
from agentkeep.persistence.interface import Transaction
from agentkeep.sessions import tables as session_tables
from agentkeep.types import JSONObject
from agentkeep.types.ledger import MESSAGE
from agentkeep.types.turns import TurnFailure, TurnRecord

if TYPE_CHECKING:
    from agentkeep.drivers.driver_run import RunState


def turn_failure(code: str, message: str, **details: Any) -> TurnFailure:
    """A turn's failure with ``details`` as its JSON details."""
    return TurnFailure(code=code, message=message, details=details)


#: Why a running driver turn was cancelled.
CANCELLED_RUNNING = TurnFailure(code="cancelled", message="Cancelled while it ran.")
#: Why a driver turn whose runner died was interrupted.
INTERRUPTED_RUN = TurnFailure(
    code="interrupted",
    message="The runner of this turn stopped before it ended; it is not replayed.",
)
#: Why a driver turn still running when the system closed was interrupted.
INTERRUPTED_CLOSE = TurnFailure(
    code="interrupted",
    message="The system closed while this turn ran; it is not replayed.",
)


def end_turn(
    tx: Transaction,
    session_id: str,
    turn: TurnRecord,
    state: RunState,
    outcome: str,
    *,
    turn_timeout_seconds: float,
) -> None:
    """End the turn of a run that returned or was given up on (``outcome``, as the runner
    watched it), in one transaction, unless the turn is terminal already.

    ``cancelling`` becomes ``cancelled``; a run cut short by the system closing is
    ``interrupted``; a timeout, an invalid event, an ignored cancellation or a raise is
    ``failed``; a returned result is checked, its message appended as a ``message`` event
    and its driver session id stored, and the turn is ``completed``.
    """
    current = tx.turns.read(session_id, turn.id)
    if current is None or current.terminal:
        return
    if current.status == "cancelling":
        tx.turns.move(session_id, turn.id, "cancelled", error=CANCELLED_RUNNING)
        return
    if state.stopping and (outcome != "returned" or state.error is not None):
        tx.turns.move(session_id, turn.id, "interrupted", error=INTERRUPTED_CLOSE)
        return
    failure = _failure(state, outcome, turn_timeout_seconds)
    if failure is not None:
        tx.turns.move(session_id, turn.id, "failed", error=failure)
        return
    try:
        result = _checked_result(state.result)
    except InvalidDriverEventError as error:
        failed = turn_failure("invalid_result", str(error))
        tx.turns.move(session_id, turn.id, "failed", error=failed)
        return
    if result.message is not None:
        data: JSONObject = {"role": "assistant", "message": result.message}
        tx.ledger.append(session_id, MESSAGE, data, turn_id=turn.id, fit=True)
    driver_session_id: str | None
    if result.driver_session_id is not None:
        session_tables.set_driver_session_id(tx, session_id, result.driver_session_id, now_ms())
        driver_session_id = result.driver_session_id
    else:
        found = session_tables.read_session(tx, session_id)
        driver_session_id = None if found is None else found.driver_session_id
    tx.turns.move(
        session_id,
        turn.id,
        "completed",
        result={
            "message": result.message,
            "metadata": result.metadata,
            "driverSessionId": driver_session_id,
        },
    )


def _failure(state: RunState, outcome: str, timeout: float) -> TurnFailure | None:
    if outcome == "invalid" and state.invalid is not None:
        return turn_failure("invalid_event", str(state.invalid))
    if outcome == "timeout":
        return turn_failure("timeout", f"The driver did not finish the turn within {timeout} s.")
    if outcome == "abandoned":  # cancelled, yet the turn is running: the system stops
        return turn_failure("driver_error", "The driver ignored its cancellation.")
    if state.error is not None:
        error = state.error
        return turn_failure("driver_error", str(error), type=type(error).__name__)
    return None


def _result_of(result: Mapping[Any, Any]) -> DriverResult:
    """The wire's ``DriverRunResult`` as a plain dict (``message``, ``driverSessionId``,
    ``metadata``, each optional; ``driver_session_id`` is accepted too) as a
    :class:`DriverResult`.

    Raises:
        InvalidDriverEventError: another key, or a value of the wrong type (named).
    """
    fields = dict(result)
    if "driver_session_id" in fields and "driverSessionId" not in fields:
        fields["driverSessionId"] = fields.pop("driver_session_id")
    unknown = sorted(str(k) for k in fields if k not in ("message", "driverSessionId", "metadata"))
    if unknown:
        raise InvalidDriverEventError(
            f"run() returned a result with unknown fields {unknown} (seed 002's "
            "DriverRunResult has message, driverSessionId and metadata)"
        )
    if fields.get("metadata") is None:
        fields.pop("metadata", None)
    try:
        return msgspec.convert(fields, DriverResult)
    except msgspec.ValidationError as error:
        raise InvalidDriverEventError(f"run() returned an invalid result: {error}") from None


def _checked_result(result: object) -> DriverResult:
    """The run's return value as a :class:`DriverResult` (None: an empty one; a dict:
    the wire's ``DriverRunResult``, :func:`_result_of`).

    Raises:
        InvalidDriverEventError: it is something else, or its fields are invalid.
    """
    if result is None:
        return DriverResult()
    if isinstance(result, Mapping):
        result = _result_of(result)
    if not isinstance(result, DriverResult):
        raise InvalidDriverEventError(
            "run() must return a DriverResult, a dict {message, driverSessionId, metadata} "
            f"or None, got {type(result).__name__}"
        )
    message = (
        None
        if result.message is None
        else check_assistant_message(result.message, "the result's message")
    )
    if result.driver_session_id is not None and not isinstance(result.driver_session_id, str):
        raise InvalidDriverEventError(
            "the result's driver_session_id must be a string or None, got "
            f"{type(result.driver_session_id).__name__}"
        )
    metadata = as_json(result.metadata, "the result's metadata")
    return msgspec.structs.replace(result, message=message, metadata=metadata)
