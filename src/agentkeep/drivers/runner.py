"""One session's driver runner: runs its queued turns one at a time, in number order.

The runner is a supervised pykka actor under the ``drivers`` supervisor (one per session
with work; it retires when none is left). For each turn it:

1. commits ``queued → running`` (``turn.running``) **before** the driver is called, reading
   the request (revision, session, history) in the same transaction
   (:func:`~agentkeep.drivers.turn_start.start_turn`);
2. starts a one-shot child actor (:class:`~agentkeep.drivers.driver_run.DriverRunActor`)
   whose thread calls ``driver.run(request, context)``, and watches it with the turn timeout;
3. ends the turn in one transaction (:func:`~agentkeep.drivers.turn_endings.end_turn`):
   ``completed`` (the result's message appended as a ``message`` event, the driver session
   id stored), ``failed`` (``driver_error``, ``timeout``, ``invalid_event``,
   ``invalid_result``) or, if the turn is ``cancelling`` (the intent is durable before the
   signal fires), ``cancelled``.

A run that does not return is never waited for past its deadline (the turn timeout, or the
cancel grace once cancelled): the runner closes its context (its later emits are refused,
nothing is written), abandons the child (out of pykka's registry) and ends the turn. Python
cannot kill a thread; an abandoned run can only waste its own time.

A ``running``/``cancelling`` turn the runner finds when it looks for work is an orphan of a
previous incarnation (a crash of the runner or of its tier): it becomes ``interrupted``
(``cancelled`` if its cancellation was asked), never replayed, the crash rule of docs/drivers.md.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Protocol

import pykka

from agentkeep.actors.children import run_child
from agentkeep.actors.supervision.supervised import (
    ChildExited,
    SupervisedActor,
    offering_child_link,
)
from agentkeep.drivers.context import DriverContext
from agentkeep.drivers.driver_run import DriverRunActor, RunState
from agentkeep.drivers.errors import DriverContextClosedError
from agentkeep.drivers.turn_endings import (
    CANCELLED_RUNNING,
    INTERRUPTED_RUN,
    end_turn,
    turn_failure,
)
from agentkeep.drivers.turn_start import start_turn
from agentkeep.drivers.types import Driver
from agentkeep.logs import get_logger
from agentkeep.persistence.interface import StoreHandle, Transaction
from agentkeep.persistence.ledger import LedgerHub
from agentkeep.providers.credentials import CredentialResolver
from agentkeep.types import JSONObject, SessionEvent
from agentkeep.types.turns import NATIVE_DRIVER, TurnRecord

log = get_logger(__name__)

_WAKE = object()


class RunnerHost(Protocol):
    """What a runner uses of the :class:`~agentkeep.drivers.host.DriverHost` that made it."""

    @property
    def store(self) -> StoreHandle:
        """The system's store."""
        ...

    @property
    def hub(self) -> LedgerHub:
        """The ledger's post-commit hub (a run's deltas go out through it)."""
        ...

    @property
    def max_event_bytes(self) -> int:
        """The bound on one event's encoded data."""
        ...

    @property
    def credentials(self) -> CredentialResolver | None:
        """Resolves a revision's ``authRef`` (``DriverContext.credential``)."""
        ...

    @property
    def drivers(self) -> Mapping[str, Driver]:
        """The registered drivers, by id."""
        ...

    @property
    def turn_timeout_seconds(self) -> float:
        """How long a run may take."""
        ...

    @property
    def cancel_grace_seconds(self) -> float:
        """How long a cancelled run may take to return before it is abandoned."""
        ...

    @property
    def active(self) -> dict[str, RunState]:
        """The runs in progress, by turn id (a runner adds and removes its own)."""
        ...

    @property
    def stopping(self) -> bool:
        """True once the system is closing: no new runs."""
        ...

    @property
    def generation(self) -> int:
        """Bumped by a tier restart: a runner of an older one stops looking for work."""
        ...

    def retire(self, session_id: str, ref: pykka.ActorRef[Any]) -> bool:
        """A runner found no work: True if it may stop (no wake came since it looked)."""
        ...

    def turn_ended(self, session_id: str) -> None:
        """A runner ended a turn."""
        ...


class DriverRunner(SupervisedActor):
    """Runs one session's driver turns (see the module docstring). Made by
    :class:`~agentkeep.drivers.host.DriverHost` only."""

    use_daemon_thread = True

    def __init__(self, host: RunnerHost, session_id: str) -> None:
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
            state.context.fire(reason)
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
        for turn in tx.turns.live(self._session_id):
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
            current = tx.turns.read(self._session_id, turn.id)
            if current is None or current.terminal or current.status == "queued":
                return
            if current.status == "cancelling":
                tx.turns.move(self._session_id, turn.id, "cancelled", error=CANCELLED_RUNNING)
            else:
                tx.turns.move(self._session_id, turn.id, "interrupted", error=INTERRUPTED_RUN)

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
            request = self._store.transact(lambda tx: start_turn(tx, self._session_id, turn))
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
                auth_ref=request.revision.definition.auth_ref,
                credentials=self._host.credentials,
            )
            with state.cond:
                state.context = context
                cancelled_early = state.cancel_at is not None
            # If this runner dies from here on, the run is cut off: signalled and closed.
            self._current = state
            if cancelled_early:
                context.fire("cancelled")
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
            timeout = self._host.turn_timeout_seconds
            self._store.transact(
                lambda tx: end_turn(
                    tx, self._session_id, turn, state, outcome, turn_timeout_seconds=timeout
                )
            )
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

    def _append(self, tx: Transaction, turn_id: str, type: str, data: JSONObject) -> SessionEvent:
        # Checked in the transaction too: whatever happened to the runner, no event of a
        # run lands after its turn's terminal event.
        current = tx.turns.read(self._session_id, turn_id)
        if current is None or current.terminal:
            raise DriverContextClosedError(
                f'Turn "{turn_id}" is {"gone" if current is None else current.status}: '
                "nothing more is written for it."
            )
        sequence = tx.ledger.append(self._session_id, type, data, turn_id=turn_id)
        return tx.ledger.events(self._session_id, sequence - 1, 1)[0]

    def _publish(self, turn_id: str, type: str, data: JSONObject) -> SessionEvent:
        self._hub.publish(self._session_id, type, data, turn_id)
        return SessionEvent(
            session_id=self._session_id,
            sequence=0,
            type=type,
            data=data,
            created_at_ms=self._hub.clock(),
            turn_id=turn_id,
        )

    def _refuse_unregistered(self, tx: Transaction, turn: TurnRecord) -> None:
        failed = turn_failure(
            "unsupported_driver", f'Driver "{turn.driver}" is not registered in this system.'
        )
        tx.turns.move(self._session_id, turn.id, "failed", error=failed)


__all__ = ["DriverRunActor", "DriverRunner", "RunState", "RunnerHost"]
