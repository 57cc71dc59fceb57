"""The supervisor actor: Erlang/OTP's ``one_for_one`` and ``rest_for_one`` on pykka.

A supervisor is a :class:`~agentkeep.actors.supervision.supervised.SupervisedActor`, so it can be
a child of another supervisor, and its giving up is its parent's child failure. Why an actor and
not a locked object: every decision (restart, stop, give up) runs in one thread, in the order
the events arrived, with no lock to hold across a child's ``start`` and no way for two failures
to interleave; a failing child only ``tell``\\ s, so it never waits on its supervisor.

Invariants:

- **The mailbox never blocks on a child while the supervisor runs.** Stopping a child (a
  ``rest_for_one`` group, ``terminate_child``) sends the stop and waits for the child's exit as
  a message, so a child that is itself waiting on the supervisor (``start_child`` from a tool, a
  ``which_children``) is answered meanwhile and can then stop. Waits are state, not threads.
- **A restart never overlaps the incarnation it replaces.** A child is restarted only after its
  exit report, which a supervised child sends as the last act of its thread.
- **A late report about an old incarnation is ignored**: exits are matched by actor urn.
- **Stopping the supervisor stops its children in reverse start order before it is gone.** That
  happens in ``on_stop`` (or ``on_failure``), which pykka runs after the mailbox loop ended, so
  there the supervisor first answers everything queued to it (a child blocked asking it is
  released), fails the ``terminate_child`` waits, and keeps doing so while it waits.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Literal

import pykka

from agentkeep.actors.supervision.errors import (
    ChildStartError,
    DuplicateChildError,
    SupervisorGaveUpError,
    SupervisorStoppedError,
    UnknownChildError,
)
from agentkeep.actors.supervision.messages import (
    Outcome,
    RestartDue,
    ShutdownTimedOut,
    StartChild,
    TerminateChild,
    WhichChildren,
)
from agentkeep.actors.supervision.scheduling import ScheduledCall, Scheduler
from agentkeep.actors.supervision.shutdown import drain_mailbox, stop_and_wait, stopped_exc_info
from agentkeep.actors.supervision.specs import (
    Backoff,
    ChildInfo,
    ChildSpec,
    RestartIntensity,
    Strategy,
)
from agentkeep.actors.supervision.supervised import (
    ChildExited,
    SupervisedActor,
    offering_link,
    tell_quietly,
    watch_unlinked_child,
)
from agentkeep.logs import get_logger

log = get_logger(__name__)

_tickets = itertools.count(1)


class _Child:
    __slots__ = (
        "on_down",
        "ref",
        "remove_when_down",
        "restart_call",
        "restart_pending",
        "restart_ticket",
        "shutdown_call",
        "spec",
        "status",
    )

    def __init__(self, spec: ChildSpec) -> None:
        self.spec = spec
        self.ref: pykka.ActorRef[Any] | None = None
        self.status: Literal["running", "stopping", "down"] = "down"
        self.restart_pending = False
        self.remove_when_down = False
        self.restart_ticket = 0
        self.restart_call: ScheduledCall | None = None
        self.shutdown_call: ScheduledCall | None = None
        self.on_down: list[Callable[[], None]] = []

    def cancel_calls(self) -> None:
        for call in (self.restart_call, self.shutdown_call):
            if call is not None:
                call.cancel()
        self.restart_call = self.shutdown_call = None


class Supervisor(SupervisedActor):
    """Supervises children; started by :func:`~agentkeep.actors.supervisor.start_supervisor`.

    The children given at construction are started in order by ``__init__``, in the caller's
    thread, so a child that cannot start makes the supervisor's own start fail (the ones
    already started are stopped first), as an OTP supervisor's ``init`` does.
    """

    def __init__(
        self,
        *,
        name: str,
        strategy: Strategy,
        children: Sequence[ChildSpec],
        intensity: RestartIntensity,
        backoff: Backoff,
        scheduler: Scheduler,
        clock: Callable[[], float],
        on_give_up: Callable[[SupervisorGaveUpError], None] | None,
        outcome: Outcome,
    ) -> None:
        super().__init__()
        self._name = name
        self._strategy = strategy
        self._intensity = intensity
        self._backoff = backoff
        self._scheduler = scheduler
        self._clock = clock
        self._on_give_up = on_give_up
        self._outcome = outcome
        self._log = log.bind(supervisor=name)
        self._state: Literal["running", "giving_up", "stopping"] = "running"
        self._gave_up: SupervisorGaveUpError | None = None
        # Insertion order is start order; a restarted child keeps its place.
        self._children: dict[str, _Child] = {}
        self._ids_by_urn: dict[str, str] = {}
        self._restarts: deque[tuple[float, str]] = deque()
        self._group_ticket = 0
        self._group_due = False
        self._group_call: ScheduledCall | None = None
        self._terminate_waits: set[pykka.Future[None]] = set()
        self._stop_replies: list[pykka.Future[Any]] = []
        for spec in children:
            error: Exception | None = None
            if spec.id in self._children:
                error = DuplicateChildError(f"two child specs have the id {spec.id!r}")
            else:
                child = self._children[spec.id] = _Child(spec)
                error = self._start(child)
                if error is not None:
                    del self._children[spec.id]
            if error is not None:
                self._stop_all_children()
                raise error

    def on_start(self) -> None:
        self._outcome.thread_ident = threading.get_ident()

    # -- messages ---------------------------------------------------------------------------

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, ChildExited):
            self._on_child_exited(message)
        elif isinstance(message, RestartDue):
            self._on_restart_due(message)
        elif isinstance(message, ShutdownTimedOut):
            self._on_shutdown_timed_out(message)
        elif isinstance(message, StartChild):
            return self._start_child(message.spec)
        elif isinstance(message, TerminateChild):
            return self._terminate_child(message.child_id)
        elif isinstance(message, WhichChildren):
            return self._which_children()
        else:
            return super().on_receive(message)
        return None

    def _start_child(self, spec: ChildSpec) -> pykka.ActorRef[Any]:
        self._refuse_unless_running()
        if spec.id in self._children:
            raise DuplicateChildError(f"supervisor {self._name!r} already has a child {spec.id!r}")
        child = self._children[spec.id] = _Child(spec)
        error = self._start(child)
        if error is not None:
            del self._children[spec.id]
            raise error
        assert child.ref is not None
        return child.ref

    def _terminate_child(self, child_id: str) -> pykka.Future[None]:
        """Stop and remove a child; the returned future is set once it has stopped."""
        self._refuse_unless_running()
        child = self._children.get(child_id)
        if child is None:
            raise UnknownChildError(f"supervisor {self._name!r} has no child {child_id!r}")
        done: pykka.Future[None] = pykka.ThreadingFuture()
        self._terminate_waits.add(done)
        child.restart_pending = False
        child.remove_when_down = True

        def answer() -> None:
            self._terminate_waits.discard(done)
            done.set(None)

        self._stop_child(child, answer)
        return done

    def _which_children(self) -> list[ChildInfo]:
        return [
            ChildInfo(
                id=child.spec.id,
                actor_ref=child.ref,
                restart=child.spec.restart,
                status="restarting" if child.status == "down" else child.status,
            )
            for child in self._children.values()
        ]

    def _refuse_unless_running(self) -> None:
        if self._state != "running":
            raise SupervisorStoppedError(f"supervisor {self._name!r} is stopping")

    # -- exits and restarts -----------------------------------------------------------------

    def _on_child_exited(self, report: ChildExited) -> None:
        child_id = self._ids_by_urn.pop(report.actor_urn, None)
        child = None if child_id is None else self._children.get(child_id)
        if child is None:
            return  # an incarnation we no longer track (timed out, or replaced)
        child.ref = None
        if child.status == "stopping":
            self._went_down(child)  # we asked for this stop: its reason does not matter
            return
        child.status = "down"
        abnormal = report.failure is not None or not report.reason_known
        if abnormal:
            self._log.warning(
                "child_failed",
                child_id=child.spec.id,
                error=repr(report.failure) if report.reason_known else "exit reason unknown",
            )
        else:
            self._log.info("child_exited", child_id=child.spec.id)
        restart = child.spec.restart
        if self._state != "running" or not (
            restart == "permanent" or (restart == "transient" and abnormal)
        ):
            self._remove(child)
            return
        self._restart_after_exit(child, report.failure)

    def _restart_after_exit(self, child: _Child, failure: BaseException | None) -> None:
        """Count a restart against the intensity, then restart ``child`` after its backoff."""
        now = self._clock()
        period = self._intensity.period_seconds
        while self._restarts and self._restarts[0][0] <= now - period:
            self._restarts.popleft()
        if len(self._restarts) >= self._intensity.max_restarts:
            self._give_up(child.spec.id, failure)
            return
        child_id = child.spec.id
        previous = sum(1 for _, restarted in self._restarts if restarted == child_id)
        self._restarts.append((now, child_id))
        delay = self._backoff.delay_seconds(previous)
        child.restart_pending = True
        self._log.info("child_restart_scheduled", child_id=child_id, delay_seconds=delay)
        if self._strategy == "one_for_one":
            child.restart_ticket = ticket = next(_tickets)
            if delay > 0:
                child.restart_call = self._call_later(delay, RestartDue(child_id, ticket))
            else:
                self._restart_one(child)
            return
        # rest_for_one: the children after this one go down too (reverse start order), then
        # the group comes back in start order, once the delay has passed.
        ids = list(self._children)
        later = [self._children[i] for i in ids[ids.index(child_id) + 1 :]]
        for other in later:
            if other.remove_when_down:
                continue  # being terminated: it goes, and stays gone
            if other.spec.restart == "temporary":
                other.remove_when_down = True  # OTP: a temporary child is not restarted
            else:
                other.restart_pending = True
        self._group_ticket = ticket = next(_tickets)
        if self._group_call is not None:
            self._group_call.cancel()
        self._group_call = None
        self._group_due = delay <= 0
        if delay > 0:
            self._group_call = self._call_later(delay, RestartDue(None, ticket))
        self._stop_in_reverse(later, self._restart_group)

    def _on_restart_due(self, due: RestartDue) -> None:
        if due.child_id is None:
            if due.ticket == self._group_ticket:
                self._group_call = None
                self._group_due = True
                self._restart_group()
            return
        child = self._children.get(due.child_id)
        if child is not None and child.restart_ticket == due.ticket and child.restart_pending:
            child.restart_call = None
            self._restart_one(child)

    def _restart_one(self, child: _Child) -> None:
        if self._state != "running":
            return
        error = self._start(child)
        if error is None:
            self._log.info("child_restarted", child_id=child.spec.id)
            return
        self._log.error("child_start_failed", child_id=child.spec.id, error=repr(error.__cause__))
        self._restart_after_exit(child, error)

    def _restart_group(self) -> None:
        """Start the pending rest_for_one group in start order, once it is due and all down."""
        if self._state != "running" or not self._group_due:
            return
        pending = [c for c in self._children.values() if c.restart_pending]
        if any(c.status != "down" for c in pending):
            return  # the last one to go down calls again
        self._group_due = False
        for child in pending:
            if not child.restart_pending:
                continue  # terminated meanwhile
            self._restart_one(child)
            if child.restart_pending:
                return  # it could not start: a new group restart is scheduled (or we gave up)

    def _give_up(self, child_id: str, failure: BaseException | None) -> None:
        error = SupervisorGaveUpError(
            self._name,
            child_id,
            max_restarts=self._intensity.max_restarts,
            period_seconds=self._intensity.period_seconds,
        )
        error.__cause__ = failure
        self._log.error("supervisor_gave_up", child_id=child_id, error=repr(failure))
        self._state = "giving_up"
        self._gave_up = error
        self._record_exit_failure(error)  # what the parent will see as this actor's failure
        self.stop()  # on_stop stops every child in reverse start order, then we escalate

    # -- starting and stopping one child ----------------------------------------------------

    def _start(self, child: _Child) -> ChildStartError | None:
        child_id = child.spec.id
        with offering_link(
            self.actor_ref, child_id, supervisor_link=self._supervision_link
        ) as link:
            try:
                # Typed ``object``: a start callable from untyped code may return anything.
                ref: object = child.spec.start()
            except Exception as exc:
                error = ChildStartError(child_id, f"start raised {exc!r}")
                error.__cause__ = exc
                return error
        if not isinstance(ref, pykka.ActorRef):
            return ChildStartError(
                child_id, f"start returned a {type(ref).__name__}, not a pykka.ActorRef"
            )
        child.ref = ref
        child.status = "running"
        child.restart_pending = False
        self._ids_by_urn[ref.actor_urn] = child_id
        if link.claimed_urn != ref.actor_urn:
            watch_unlinked_child(ref, self.actor_ref, child_id)
        return None

    def _stop_child(self, child: _Child, then: Callable[[], None]) -> None:
        """Ask ``child`` to stop; call ``then`` (in this thread) once it is down."""
        if child.status == "down":
            if child.remove_when_down:
                self._remove(child)
            then()
            return
        child.on_down.append(then)
        if child.status == "stopping":
            return
        child.status = "stopping"
        ref = child.ref
        assert ref is not None
        ref.stop(block=False)  # a dead actor answers with an error we need not read
        timeout = child.spec.shutdown_timeout_seconds
        if timeout is not None:
            child.shutdown_call = self._scheduler.call_later(
                timeout,
                self._teller(ShutdownTimedOut(child.spec.id, ref.actor_urn)),
                purpose="shutdown_timeout",
            )

    def _stop_in_reverse(self, children: list[_Child], then: Callable[[], None]) -> None:
        if not children:
            then()
            return
        *earlier, last = children
        self._stop_child(last, lambda: self._stop_in_reverse(earlier, then))

    def _on_shutdown_timed_out(self, timed_out: ShutdownTimedOut) -> None:
        if self._ids_by_urn.get(timed_out.actor_urn) != timed_out.child_id:
            return
        child = self._children[timed_out.child_id]
        if child.status != "stopping":
            return
        # Pykka cannot kill a thread: go on without it; its late exit report is ignored.
        self._log.error(
            "child_shutdown_timed_out",
            child_id=timed_out.child_id,
            timeout_seconds=child.spec.shutdown_timeout_seconds,
        )
        del self._ids_by_urn[timed_out.actor_urn]
        child.shutdown_call = None
        child.ref = None
        self._went_down(child)

    def _went_down(self, child: _Child) -> None:
        child.status = "down"
        child.cancel_calls()
        if child.remove_when_down:
            self._remove(child)
        callbacks, child.on_down = child.on_down, []
        for callback in callbacks:
            callback()

    def _remove(self, child: _Child) -> None:
        child.cancel_calls()
        child.restart_pending = False
        if self._children.get(child.spec.id) is child:
            del self._children[child.spec.id]

    def _call_later(self, delay_seconds: float, message: RestartDue) -> ScheduledCall:
        return self._scheduler.call_later(delay_seconds, self._teller(message), purpose="restart")

    def _teller(self, message: Any) -> Callable[[], None]:
        ref = self.actor_ref
        return lambda: tell_quietly(ref, message)

    # -- the end ----------------------------------------------------------------------------

    def on_stop(self) -> None:
        self._shut_down()

    def on_failure(
        self,
        exception_type: type[BaseException] | None,
        exception_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # A bug in the supervisor itself: pykka skips on_stop, but the children must still go.
        self._shut_down()

    def _shut_down(self) -> None:
        self._state = "stopping"
        if self._group_call is not None:
            self._group_call.cancel()
        for child in self._children.values():
            child.cancel_calls()
        # Release everyone waiting on us before waiting on anyone.
        for done in self._terminate_waits:
            done.set_exception(stopped_exc_info(self._name))
        self._terminate_waits.clear()
        self._stop_all_children()
        if self._gave_up is not None and self._on_give_up is not None:
            try:
                self._on_give_up(self._gave_up)
            except Exception:
                self._log.exception("on_give_up_failed")
        self._log.info("supervisor_stopped", failure=repr(self._supervision_failure))
        self._outcome.finish(self._supervision_failure)
        for reply in self._stop_replies:
            reply.set(None)

    def _stop_all_children(self) -> None:
        """Stop every child in reverse start order, waiting for each (bounded by its timeout)."""
        for child in reversed(list(self._children.values())):
            self._drain_mailbox()
            if child.ref is not None:
                self._stop_and_wait(child.spec, child.ref)
            child.ref = None
        self._children.clear()

    def _stop_and_wait(self, spec: ChildSpec, ref: pykka.ActorRef[Any]) -> None:
        if not stop_and_wait(spec, ref, while_waiting=self._drain_mailbox):
            self._log.error(
                "child_shutdown_timed_out",
                child_id=spec.id,
                timeout_seconds=spec.shutdown_timeout_seconds,
            )

    def _drain_mailbox(self) -> None:
        drain_mailbox(self, on_exit=self._forget_exited, stop_replies=self._stop_replies)

    def _forget_exited(self, report: ChildExited) -> None:
        child_id = self._ids_by_urn.pop(report.actor_urn, None)
        child = None if child_id is None else self._children.get(child_id)
        if child is not None:
            child.ref = None  # already gone: nothing to wait for
