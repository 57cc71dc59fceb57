"""Sending, reading, waiting for and cancelling a session's turns (docs/turns.md).

A turn is written by the acceptance transaction (:func:`agentkeep.delivery.accept_message`)
and moved by the loop's transactions (:mod:`agentkeep.runtime.session_turns`); this module
is the caller's side of it. Its rules:

- **Waiting reads the ledger, never memory.** :meth:`TurnHandle.wait` reads the turn and the
  session's last sequence in one snapshot, then follows the ledger from there: a terminal
  ``turn.*`` event that commits at any moment after the snapshot is seen, so a wait never
  misses its turn's end, whatever the timing.
- **Cancellation intent is durable before anything acts on it.** A running turn becomes
  ``cancelling`` in its own transaction before the loop is aborted (or an injected driver's
  cancel signal fires: its runner then ends the turn ``cancelled``); a queued turn's waiting
  input is removed and the turn ``cancelled`` in one transaction (of two cancellers, or a
  canceller and the loop consuming the input, exactly one wins: the queue delete is the
  claim). A running turn's ``cancelling`` takes the input steers joined to it and that still
  waits out of the queue in the same transaction: it never runs as work of no turn.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from agentkeep.delivery import DeliveryKind
from agentkeep.errors import AwaitFromOwnLoopError, TurnStateError
from agentkeep.persistence.interface import Transaction
from agentkeep.runtime import session_turns
from agentkeep.sessions import owing
from agentkeep.sessions.errors import UnknownSessionError, UnknownTurnError
from agentkeep.types import JSONObject, MessageOptions, QueueableMessage, SessionEvent
from agentkeep.types.records import QueueName
from agentkeep.types.turns import (
    NATIVE_DRIVER,
    TERMINAL_STATUSES,
    TurnFailure,
    TurnRecord,
    turn_event_type,
)

if TYPE_CHECKING:
    # An annotation only: the parts are built (and this module imported) by the system.
    from agentkeep.agent_system._internals import SystemInternals

_TERMINAL_EVENTS = frozenset(turn_event_type(s) for s in TERMINAL_STATUSES)
#: Why a turn that never ran was cancelled.
CANCELLED_QUEUED = TurnFailure(code="cancelled", message="Cancelled before it started.")
#: Why a running turn was cancelled.
CANCELLED_RUNNING = TurnFailure(code="cancelled", message="Cancelled while it ran.")


class TurnHandle:
    """A sent turn (the wire's ``EnqueuedTurn``): the turn as durably accepted, whether an
    earlier send with the same idempotency key had made it, and :meth:`wait` for its end."""

    def __init__(
        self, turn: TurnRecord, duplicate: bool, wait: Callable[[float | None], TurnRecord]
    ) -> None:
        self.turn = turn
        self.duplicate = duplicate
        self._wait = wait

    def wait(self, timeout_seconds: float | None = None) -> TurnRecord:
        """Block until the turn is terminal and return it.

        Raises:
            TimeoutError: it is still live after ``timeout_seconds``.
        """
        return self._wait(timeout_seconds)

    def __repr__(self) -> str:
        return (
            f"TurnHandle(turn={self.turn.id!r}, status={self.turn.status!r}, "
            f"duplicate={self.duplicate})"
        )


class TurnService:
    """The turn operations of ``AgentSystem.sessions`` (see the module docstring)."""

    def __init__(self, parts: SystemInternals) -> None:
        self._store = parts.store.handle
        self._acceptance = parts.acceptance  # the system's one acceptance path
        self._requests = parts.requests  # abort, wake, wait_for_idle
        self._reads = parts.reads
        self._drivers = parts.drivers

    # -- sending ---------------------------------------------------------------------------
    def send(
        self,
        session_id: str,
        message: QueueableMessage,
        *,
        idempotency_key: str | None,
        delivery: DeliveryKind,
        message_id: str | None,
        metadata: JSONObject | None,
        options: MessageOptions | None,
        start: bool = True,
    ) -> TurnHandle:
        """Accept ``message`` as a turn (or a steer joining one); see ``Sessions.send``."""
        queue: QueueName = "steering" if delivery == "steer" else "send"
        accepted, turn = self._acceptance.accept_turn(
            session_id,
            queue,
            message,
            id=message_id,
            metadata=metadata,
            options=options,
            start=start,
            idempotency_key=idempotency_key,
        )
        if turn is None:  # pragma: no cover - every accepted message has a turn
            raise TurnStateError(f'Message "{accepted.id}" belongs to no turn.')
        # The turn as the acceptance committed it (docs/turns.md: queued, or running when
        # consumed there), not read again after the commit.
        return self.handle(turn, duplicate=not accepted.created)

    def handle(self, turn: TurnRecord, *, duplicate: bool) -> TurnHandle:
        """A handle whose ``wait`` follows ``turn`` to its end."""
        return TurnHandle(
            turn, duplicate, lambda timeout: self.wait(turn.session_id, turn.id, timeout)
        )

    # -- reading ---------------------------------------------------------------------------
    def get(self, session_id: str, turn_id: str) -> TurnRecord:
        """The turn; ``UnknownSessionError``/``UnknownTurnError`` if there is none."""

        def read(tx: Transaction) -> TurnRecord | None:
            _require_session(tx, session_id)
            return tx.turns.read(session_id, turn_id)

        found = self._store.read(read)
        if found is None:
            raise UnknownTurnError(session_id, turn_id)
        return found

    def list(self, session_id: str, after: int, limit: int) -> list[TurnRecord]:
        """The session's turns numbered above ``after``, at most ``limit``, in order."""

        def read(tx: Transaction) -> list[TurnRecord]:
            _require_session(tx, session_id)
            return tx.turns.page(session_id, after, limit)

        return self._store.read(read)

    def wait(self, session_id: str, turn_id: str, timeout_seconds: float | None) -> TurnRecord:
        """Block until the turn is terminal (see the module's rules); ``TimeoutError``."""
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds

        def snapshot(tx: Transaction) -> tuple[TurnRecord | None, int]:
            _require_session(tx, session_id)
            return tx.turns.read(session_id, turn_id), tx.ledger.last_sequence(session_id)

        turn, last = self._store.read(snapshot)
        if turn is None:
            raise UnknownTurnError(session_id, turn_id)
        if turn.terminal:
            return turn
        subscription = self._reads.subscribe(session_id, after=last)
        try:
            while True:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(
                        f'Turn "{turn_id}" of session "{session_id}" is still {turn.status} '
                        f"after {timeout_seconds} s."
                    )
                try:
                    event = subscription.next(timeout_seconds=remaining)
                except TimeoutError:
                    continue  # the deadline check above raises with the turn's status
                except StopIteration:
                    return self.get(session_id, turn_id)  # the system closed: as it stands
                if _ends(event, turn_id):
                    return self.get(session_id, turn_id)
        finally:
            subscription.close()

    # -- cancelling ------------------------------------------------------------------------
    def cancel(
        self, session_id: str, turn_id: str | None, timeout_seconds: float | None
    ) -> TurnRecord:
        """Cancel the turn (the active one if None); see the module's rules."""
        unqueued: list[str] = []  # the native queued turn this cancel took out of the queue

        def mark(tx: Transaction) -> tuple[TurnRecord, bool]:
            unqueued.clear()  # a retried transaction starts over
            _require_session(tx, session_id)
            turn = _target(tx, session_id, turn_id)
            if turn.terminal or turn.status == "cancelling":
                return turn, False
            if turn.driver != NATIVE_DRIVER:
                # An injected driver's turn: only its runner moves it to running (in the
                # writer, so this transaction sees whether it did).
                if turn.status == "queued":
                    cancelled = tx.turns.move(
                        session_id, turn.id, "cancelled", error=CANCELLED_QUEUED
                    )
                    return cancelled, False
                return tx.turns.move(session_id, turn.id, "cancelling"), True
            if turn.status == "queued" and session_turns.unqueue_inputs(tx, session_id, turn.id):
                unqueued.append(turn.id)
                return tx.turns.move(
                    session_id, turn.id, "cancelled", error=CANCELLED_QUEUED
                ), False
            # Running (or its input was consumed just now): the intent is durable first, and
            # what steers joined to it and still waits leaves the queue with it.
            current = tx.turns.read(session_id, turn.id)
            assert current is not None  # read above, in this transaction
            if current.status == "queued":
                tx.turns.move(session_id, turn.id, "running")
            session_turns.unqueue_inputs(tx, session_id, turn.id)
            return tx.turns.move(session_id, turn.id, "cancelling"), True

        turn, abort = self._store.transact(mark)
        if unqueued:
            # A queued turn, taken out of the queue. With no other live turn, the work its
            # acceptance made owed is nobody's: a run settles it (the one its acceptance woke,
            # or this wake's where none runs — an acceptance with ``start=False``), and the
            # cancel returns once it has (bounded by the timeout), so the session reads idle
            # instead of owing work no turn holds.
            leftover = self._store.read(
                lambda tx: (
                    not tx.turns.live(session_id) and tx.facts.read_owed(session_id) is not None
                )
            )
            if leftover:
                self._requests.wake(session_id)
                with contextlib.suppress(AwaitFromOwnLoopError):  # asked from its own loop
                    self._requests.wait_for_idle(session_id, timeout_seconds=timeout_seconds)
            return turn
        if turn.status == "cancelling" and turn.driver != NATIVE_DRIVER:
            # The intent is durable: now the signal; the runner ends the turn when the run
            # returns or raises, or abandons it after the grace.
            if abort:
                self._drivers.cancel(turn.id)
            try:
                return self.wait(session_id, turn.id, timeout_seconds)
            except TimeoutError:
                return self.get(session_id, turn.id)
        if turn.status == "cancelling":
            if abort:
                self._requests.abort(session_id, wait=True, timeout_seconds=timeout_seconds)
            cancelling_id = turn.id
            turn = self._store.transact(lambda tx: _finish_cancel(tx, session_id, cancelling_id))
            # Turns queued behind the cancelled one still run: the abort left them waiting.
            # Work still owed without them (the aborted run stopped on input a steer had
            # queued, which this cancel took back) is settled by the same wake.
            queued, owes = self._store.read(
                lambda tx: (
                    bool(tx.queue.messages(session_id)),
                    tx.facts.read_owed(session_id) is not None,
                )
            )
            if queued or owes:
                self._requests.wake(session_id)
                if not queued:  # the wake only settles: return once it has
                    self._requests.wait_for_idle(session_id, timeout_seconds=timeout_seconds)
        return turn


def _finish_cancel(tx: Transaction, session_id: str, turn_id: str) -> TurnRecord:
    """After the abort: a turn the loop has not ended yet is cancelled now (the abort
    stopped the work it asked for; anything the resumed loop still owes belongs to no turn)."""
    turn = tx.turns.read(session_id, turn_id)
    assert turn is not None  # turns are never deleted while their session exists
    if turn.status == "cancelling":
        return tx.turns.move(session_id, turn_id, "cancelled", error=CANCELLED_RUNNING)
    return turn


def _target(tx: Transaction, session_id: str, turn_id: str | None) -> TurnRecord:
    if turn_id is not None:
        found = tx.turns.read(session_id, turn_id)
        if found is None:
            raise UnknownTurnError(session_id, turn_id)
        return found
    live = tx.turns.live(session_id)
    active = [t for t in live if t.status != "queued"] or live
    if not active:
        owed = owing.owes(tx, session_id)
        if owed is not None:
            raise TurnStateError(
                f'Session "{session_id}" has no live turn to cancel, but it owes work no turn '
                f"holds ({owed.reason}): {owing.settle_hint(session_id)}."
            )
        raise TurnStateError(
            f'Session "{session_id}" has no live turn to cancel: it is idle (send it a message '
            "to start one)."
        )
    return active[-1]


def _ends(event: SessionEvent, turn_id: str) -> bool:
    return event.turn_id == turn_id and event.type in _TERMINAL_EVENTS


def _require_session(tx: Transaction, session_id: str) -> None:
    if not tx.ledger.agent_known(session_id):
        raise UnknownSessionError(session_id)
