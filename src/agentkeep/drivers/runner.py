"""One session's driver runner: runs its queued turns one at a time, in number order.

The runner is a supervised pykka actor under the ``drivers`` supervisor (one per session
with work; it retires when none is left). For each turn it:

1. commits ``queued → running`` (``turn.running``) **before** the driver is called, reading
   the request (revision, session, history) in the same transaction;
2. starts a one-shot child actor (:class:`DriverRunActor`) whose thread calls
   ``driver.run(request, context)``, and watches it with the turn timeout;
3. ends the turn in one transaction: ``completed`` (the result's message appended as a
   ``message`` event, the driver session id stored), ``failed`` (``driver_error``,
   ``timeout``, ``invalid_event``, ``invalid_result``) or, if the turn is ``cancelling``
   (the intent is durable before the signal fires), ``cancelled``.

A run that does not return is never waited for past its deadline (the turn timeout, or the
cancel grace once cancelled): the runner closes its context (its later emits are refused,
nothing is written), abandons the child (out of pykka's registry) and ends the turn. Python
cannot kill a thread; an abandoned run can only waste its own time.

A ``running``/``cancelling`` turn the runner finds when it looks for work is an orphan of a
previous incarnation (a crash of the runner or of its tier): it becomes ``interrupted``
(``cancelled`` if its cancellation was asked), never replayed, seed 002's crash rule.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec
import pykka
import structlog

from agentkeep.actors.children import OneShotChild, run_child
from agentkeep.actors.supervision.supervised import (
    ChildExited,
    SupervisedActor,
    offering_child_link,
)
from agentkeep.drivers.context import DriverContext, as_json, check_assistant_message
from agentkeep.drivers.types import (
    Driver,
    DriverContextClosedError,
    DriverResult,
    DriverRunRequest,
    InvalidDriverEventError,
)
from agentkeep.model import JSONObject, SessionEvent
from agentkeep.model.ledger import MAX_EVENTS_PAGE, MESSAGE
from agentkeep.model.turns import NATIVE_DRIVER, TurnFailure, TurnRecord
from agentkeep.persistence.codec import now_ms
from agentkeep.persistence.interface import StoreHandle, Transaction
from agentkeep.persistence.ledger import LedgerHub
from agentkeep.registry import tables as registry_tables
from agentkeep.sessions import tables as session_tables

if TYPE_CHECKING:
    from agentkeep.drivers.host import DriverHost

log = structlog.get_logger(__name__)

_WAKE = object()


@dataclass(eq=False)
class RunState:
    """One run, shared by the runner, its child and the cancelling caller; ``cond`` guards
    the fields and wakes the runner."""

    turn_id: str
    cond: threading.Condition = field(default_factory=threading.Condition)
    context: DriverContext | None = None
    done: bool = False
    result: object = None
    error: BaseException | None = None
    invalid: InvalidDriverEventError | None = None
    cancel_at: float | None = None  # monotonic time the cancel signal fired
    stopping: bool = False  # the system is closing

    def request_cancel(self, reason: str, *, stopping: bool = False) -> None:
        """Mark the run cancelled (the durable intent is written already) and fire the
        signal."""
        with self.cond:
            if stopping:
                self.stopping = True
            if self.cancel_at is None:
                self.cancel_at = time.monotonic()
            context = self.context
            self.cond.notify_all()
        if context is not None:
            context.signal(reason)

    def finish(self, result: object, error: BaseException | None) -> None:
        """The run returned ``result`` or raised ``error`` (the first outcome counts)."""
        with self.cond:
            if not self.done:
                self.done, self.result, self.error = True, result, error
            self.cond.notify_all()

    def refuse(self, error: InvalidDriverEventError) -> None:
        """The run emitted something invalid: the turn fails ``invalid_event``."""
        with self.cond:
            if self.invalid is None:
                self.invalid = error
            self.cond.notify_all()


class DriverRunActor(OneShotChild):
    """The one-shot child whose thread calls ``driver.run`` (a daemon thread: an abandoned
    run never keeps the process alive). Whatever ``run`` returns or raises goes to the
    run's state; nothing escapes into the runner."""

    def __init__(
        self,
        parent: pykka.ActorRef[Any],
        driver: Driver,
        request: DriverRunRequest,
        context: DriverContext,
        state: RunState,
    ) -> None:
        super().__init__(parent)
        self._driver = driver
        self._request = request
        self._context = context
        self._state = state

    def _work(self) -> None:
        try:
            result = self._driver.run(self._request, self._context)
        except BaseException as error:  # a driver must never take its runner down
            self._state.finish(None, error)
        else:
            self._state.finish(result, None)


def turn_failure(code: str, message: str, **details: Any) -> TurnFailure:
    """A turn's failure with ``details`` as its JSON details."""
    return TurnFailure(code=code, message=message, details=details)


class DriverRunner(SupervisedActor):
    """Runs one session's driver turns (see the module docstring). Made by
    :class:`~agentkeep.drivers.host.DriverHost` only."""

    use_daemon_thread = True

    def __init__(self, host: DriverHost, session_id: str) -> None:
        super().__init__()
        self._host = host
        self._session_id = session_id
        self._store: StoreHandle = host.store
        self._hub: LedgerHub = host.hub
        self._current: RunState | None = None  # the run in progress, if any
        self._generation = host.generation

    def _cut_off(self, reason: str) -> None:
        """A run this incarnation leaves behind can write nothing more."""
        state, self._current = self._current, None
        if state is not None and state.context is not None:
            state.context.signal(reason)
            state.context.close()

    def on_start(self) -> None:
        self.actor_ref.tell(_WAKE)  # a restarted incarnation looks for work by itself

    def on_receive(self, message: Any) -> None:
        if isinstance(message, ChildExited):
            return  # a run's thread ended: its outcome went to its RunState already
        if message is not _WAKE:
            return
        while not self._host.stopping and self._generation == self._host.generation:
            turn = self._store.read(self._next_turn)
            if turn is None:
                if self._host.retire(self._session_id, self.actor_ref):
                    self.stop()
                    return
                continue  # woken meanwhile: look again
            if turn.status == "queued":
                self._run(turn)
            else:
                self._orphaned(turn)

    # -- looking for work ------------------------------------------------------------------
    def _next_turn(self, tx: Transaction) -> TurnRecord | None:
        for turn in tx.live_turns(self._session_id):
            if turn.driver != NATIVE_DRIVER:
                return turn
        return None

    def _orphaned(self, turn: TurnRecord) -> None:
        """A live turn no run of this process is watching (its runner died)."""
        stale = self._host.active.pop(turn.id, None)
        if stale is not None:
            stale.request_cancel("its runner stopped")
            if stale.context is not None:
                stale.context.close()

        def end(tx: Transaction) -> None:
            current = tx.read_turn(self._session_id, turn.id)
            if current is None or current.terminal or current.status == "queued":
                return
            if current.status == "cancelling":
                tx.move_turn(self._session_id, turn.id, "cancelled", error=CANCELLED_RUNNING)
            else:
                tx.move_turn(self._session_id, turn.id, "interrupted", error=INTERRUPTED_RUN)

        self._store.transact(end)

    # -- one turn --------------------------------------------------------------------------
    def _run(self, turn: TurnRecord) -> None:
        driver = self._host.drivers.get(turn.driver)
        state = RunState(turn.id)
        # Registered before the turn is running, so a cancel that finds it running finds it.
        self._host.active[turn.id] = state
        try:
            if driver is None:  # pragma: no cover - acceptance refuses unregistered drivers
                self._store.transact(lambda tx: self._refuse_unregistered(tx, turn))
                return
            request = self._store.transact(lambda tx: self._start(tx, turn))
            if request is None:
                return  # cancelled before it started (or its session is gone)
            context = DriverContext(
                session_id=self._session_id,
                turn_id=turn.id,
                commit=lambda type, data: self._store.transact(
                    lambda tx: self._append(tx, turn.id, type, data)
                ),
                publish=lambda type, data: self._publish(turn.id, type, data),
                max_event_bytes=self._host.max_event_bytes,
                on_invalid=state.refuse,
            )
            with state.cond:
                state.context = context
                cancelled_early = state.cancel_at is not None
            # If this runner dies from here on, the run is cut off: signalled and closed.
            self._current = state
            if cancelled_early:
                context.signal("cancelled")
            with offering_child_link(self, turn.id):
                child = run_child(DriverRunActor, self.actor_ref, driver, request, context, state)
            outcome = self._watch(state)
            context.close()  # waits for an emit already committing; refuses the rest
            if outcome != "returned":
                pykka.ActorRegistry.unregister(child)  # abandoned: nobody waits for it
                log.warning(
                    "driver_run_abandoned",
                    session_id=self._session_id,
                    turn_id=turn.id,
                    driver=turn.driver,
                    why=outcome,
                )
            self._store.transact(lambda tx: self._end(tx, turn, state, outcome))
        except BaseException:
            self._cut_off("its runner failed")
            raise
        finally:
            self._current = None
            self._host.active.pop(turn.id, None)
            self._host.turn_ended(self._session_id)

    def _watch(self, state: RunState) -> str:
        """Wait for the run: ``returned``, ``invalid``, ``timeout`` or ``abandoned``."""
        deadline = time.monotonic() + self._host.turn_timeout_seconds
        grace = self._host.cancel_grace_seconds
        with state.cond:
            while True:
                if state.invalid is not None:
                    reason = "invalid"
                    break
                if state.done:
                    return "returned"
                now = time.monotonic()
                if state.cancel_at is not None:
                    until = state.cancel_at + grace
                    if now >= until:
                        return "abandoned"
                elif now >= deadline:
                    reason = "timeout"
                    break
                else:
                    until = deadline
                state.cond.wait(until - now)
        state.request_cancel("the turn failed" if reason == "invalid" else "the turn timed out")
        return reason

    def _start(self, tx: Transaction, turn: TurnRecord) -> DriverRunRequest | None:
        current = tx.read_turn(self._session_id, turn.id)
        if current is None or current.status != "queued":
            return None
        session = session_tables.read_session(tx, self._session_id)
        revision = (
            None
            if session is None or session.revision_id is None
            else registry_tables.read_revision(tx, session.revision_id)
        )
        if session is None or revision is None:
            # The session was deleted after the turn was accepted: nothing to run it for.
            gone = turn_failure("session_deleted", "The session was deleted before it ran.")
            tx.move_turn(self._session_id, turn.id, "failed", error=gone)
            return None
        running = tx.move_turn(self._session_id, turn.id, "running")
        return DriverRunRequest(
            revision=revision,
            session=session,
            turn=running,
            history=tuple(_history(tx, self._session_id, running.number)),
            input=running.input,
            driver_session_id=session.driver_session_id,
        )

    def _append(self, tx: Transaction, turn_id: str, type: str, data: JSONObject) -> SessionEvent:
        # Checked in the transaction too: whatever happened to the runner, no event of a
        # run lands after its turn's terminal event.
        current = tx.read_turn(self._session_id, turn_id)
        if current is None or current.terminal:
            raise DriverContextClosedError(
                f'Turn "{turn_id}" is {"gone" if current is None else current.status}: '
                "nothing more is written for it."
            )
        sequence = tx.append_event(self._session_id, type, data, turn_id=turn_id)
        return tx.events(self._session_id, sequence - 1, 1)[0]

    def _publish(self, turn_id: str, type: str, data: JSONObject) -> SessionEvent:
        self._hub.publish(self._session_id, type, data, turn_id)
        return SessionEvent(
            session_id=self._session_id,
            sequence=0,
            type=type,
            data=data,
            created_at_ms=now_ms(),
            turn_id=turn_id,
        )

    def _end(self, tx: Transaction, turn: TurnRecord, state: RunState, outcome: str) -> None:
        sid = self._session_id
        current = tx.read_turn(sid, turn.id)
        if current is None or current.terminal:
            return
        if current.status == "cancelling":
            tx.move_turn(sid, turn.id, "cancelled", error=CANCELLED_RUNNING)
            return
        if state.stopping and (outcome != "returned" or state.error is not None):
            tx.move_turn(sid, turn.id, "interrupted", error=INTERRUPTED_CLOSE)
            return
        failure = self._failure(state, outcome)
        if failure is not None:
            tx.move_turn(sid, turn.id, "failed", error=failure)
            return
        try:
            result = _checked_result(state.result)
        except InvalidDriverEventError as error:
            failed = turn_failure("invalid_result", str(error))
            tx.move_turn(sid, turn.id, "failed", error=failed)
            return
        if result.message is not None:
            data: JSONObject = {"role": "assistant", "message": result.message}
            tx.append_event(sid, MESSAGE, data, turn_id=turn.id, fit=True)
        driver_session_id: str | None
        if result.driver_session_id is not None:
            session_tables.set_driver_session_id(tx, sid, result.driver_session_id, now_ms())
            driver_session_id = result.driver_session_id
        else:
            found = session_tables.read_session(tx, sid)
            driver_session_id = None if found is None else found.driver_session_id
        tx.move_turn(
            sid,
            turn.id,
            "completed",
            result={
                "message": result.message,
                "metadata": result.metadata,
                "driverSessionId": driver_session_id,
            },
        )

    def _failure(self, state: RunState, outcome: str) -> TurnFailure | None:
        timeout = self._host.turn_timeout_seconds
        if outcome == "invalid" and state.invalid is not None:
            return turn_failure("invalid_event", str(state.invalid))
        if outcome == "timeout":
            return turn_failure(
                "timeout", f"The driver did not finish the turn within {timeout} s."
            )
        if outcome == "abandoned":  # cancelled, yet the turn is running: the system stops
            return turn_failure("driver_error", "The driver ignored its cancellation.")
        if state.error is not None:
            error = state.error
            return turn_failure("driver_error", str(error), type=type(error).__name__)
        return None

    def _refuse_unregistered(self, tx: Transaction, turn: TurnRecord) -> None:
        failed = turn_failure(
            "unsupported_driver", f'Driver "{turn.driver}" is not registered in this system.'
        )
        tx.move_turn(self._session_id, turn.id, "failed", error=failed)


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


def _checked_result(result: object) -> DriverResult:
    """The run's return value as a :class:`DriverResult` (None: an empty one).

    Raises:
        InvalidDriverEventError: it is something else, or its fields are invalid.
    """
    if result is None:
        return DriverResult()
    if not isinstance(result, DriverResult):
        raise InvalidDriverEventError(
            f"run() must return a DriverResult or None, got {type(result).__name__}"
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


def _history(tx: Transaction, session_id: str, before: int) -> list[JSONObject]:
    """Each earlier completed turn's input, then its ``message`` events' messages."""
    completed: dict[str, TurnRecord] = {}
    after = 0
    while True:
        page = tx.list_turns(session_id, after, MAX_EVENTS_PAGE)
        for turn in page:
            if turn.number < before and turn.status == "completed":
                completed[turn.id] = turn
        if len(page) < MAX_EVENTS_PAGE or page[-1].number >= before:
            break
        after = page[-1].number
    outputs: dict[str, list[JSONObject]] = {turn_id: [] for turn_id in completed}
    sequence = 0
    while True:
        events = tx.events(session_id, sequence, MAX_EVENTS_PAGE)
        for event in events:
            message = event.data.get("message")
            if event.type == MESSAGE and event.turn_id in outputs and isinstance(message, dict):
                outputs[event.turn_id].append(message)
        if len(events) < MAX_EVENTS_PAGE:
            break
        sequence = events[-1].sequence
    history: list[JSONObject] = []
    for turn in sorted(completed.values(), key=lambda t: t.number):
        history.append(turn.input)
        history.extend(outputs[turn.id])
    return history


__all__ = ["DriverRunActor", "DriverRunner", "RunState"]
