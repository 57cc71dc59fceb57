"""Turns (the wire's ``AgentTurn``): one accepted user input, its idempotency key and its state.

A turn is opened by a ``send`` (a steer joins the session's running turn instead, or opens
one when none runs: docs/turns.md) in the transaction that accepts its message, together with
the message's ``message.accepted`` event. Its status moves only forward::

    queued → running → completed | failed | cancelling → cancelled | interrupted

and a terminal status never changes (the store's triggers refuse it). Every move appends one
``turn.<status>`` event in the transaction that makes it, so the ledger tells a turn's whole
life in order.
"""

from __future__ import annotations

from typing import Final, Literal, TypeAlias

import msgspec

from agentkeep.types.records import JSONObject

TurnStatus: TypeAlias = Literal[
    "queued", "running", "cancelling", "completed", "failed", "cancelled", "interrupted"
]
#: How a message joins its session's turns: ``send`` opens a turn, ``steer`` joins the
#: running one (or opens one when none runs).
TurnDelivery: TypeAlias = Literal["send", "steer"]

#: Statuses a turn can still leave.
LIVE_STATUSES: Final[tuple[TurnStatus, ...]] = ("queued", "running", "cancelling")
#: Statuses a turn never leaves.
TERMINAL_STATUSES: Final[tuple[TurnStatus, ...]] = (
    "completed",
    "failed",
    "cancelled",
    "interrupted",
)
#: The moves a turn may make (from → allowed next statuses).
TRANSITIONS: Final[dict[TurnStatus, tuple[TurnStatus, ...]]] = {
    "queued": ("running", "cancelled", "interrupted", "failed"),
    "running": ("completed", "failed", "cancelling", "interrupted"),
    "cancelling": ("cancelled", "interrupted"),
    "completed": (),
    "failed": (),
    "cancelled": (),
    "interrupted": (),
}
#: The native driver: agentkeep's own durable loop (a crash resumes its turns).
NATIVE_DRIVER: Final = "agentkeep"
#: The longest idempotency key accepted (any other string of 1..this many characters is fine).
MAX_IDEMPOTENCY_KEY_LENGTH: Final = 255

# The ledger event a move to each status appends.
TURN_EVENT_PREFIX: Final = "turn."


def turn_event_type(status: TurnStatus) -> str:
    """The ledger event type of a move to ``status`` (``turn.running`` …)."""
    return TURN_EVENT_PREFIX + status


class TurnFailure(msgspec.Struct, frozen=True, kw_only=True):
    """Why a turn failed, was cancelled or was interrupted (the wire's ``AgentFailure``)."""

    code: str
    message: str
    details: JSONObject = msgspec.field(default_factory=dict)


class TurnRecord(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One turn (the wire's ``AgentTurn``; JSON names are the wire's).

    Attributes:
        id: The turn id.
        session_id: Its session (agent).
        number: Its place among the session's turns, from 1 (turns run in this order).
        idempotency_key: Unique in the session, never released (compaction and model resets
            keep it): repeating it returns this turn instead of opening another.
        driver: The driver that runs it (``agentkeep``: the native loop).
        status: See the module docstring.
        input: The message that opened it, as accepted (``role``, ``content``).
        message_id: The queued message that opened it (native turns), or None.
        result: What it produced once ``completed`` (native: ``{"message": <the assistant
            message that answered it>}``; injected drivers: their result).
        error: Why it failed, was cancelled or interrupted.
        created_at_ms: When it was accepted.
        started_at_ms: When it started running.
        completed_at_ms: When it reached its terminal status.
    """

    id: str
    session_id: str
    number: int
    idempotency_key: str
    driver: str
    status: TurnStatus
    input: JSONObject
    message_id: str | None = None
    result: JSONObject | None = None
    error: TurnFailure | None = None
    created_at_ms: int
    started_at_ms: int | None = None
    completed_at_ms: int | None = None

    @property
    def terminal(self) -> bool:
        """True once the status can never change."""
        return self.status in TERMINAL_STATUSES


class SentTurn(msgspec.Struct, frozen=True, kw_only=True):
    """What sending a turn returns: the turn as durably accepted, and whether an earlier send
    with the same idempotency key had already made it (the wire's ``EnqueuedTurn`` minus the
    completion, which ``Sessions.wait`` provides)."""

    turn: TurnRecord
    duplicate: bool


__all__ = [
    "LIVE_STATUSES",
    "MAX_IDEMPOTENCY_KEY_LENGTH",
    "NATIVE_DRIVER",
    "TERMINAL_STATUSES",
    "TRANSITIONS",
    "TURN_EVENT_PREFIX",
    "SentTurn",
    "TurnDelivery",
    "TurnFailure",
    "TurnRecord",
    "TurnStatus",
    "turn_event_type",
]
