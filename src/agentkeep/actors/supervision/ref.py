"""Starting a supervisor, and the thread-safe handle the rest of the runtime holds on it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, get_args

import pykka

from agentkeep.actors.supervision.actor import Supervisor
from agentkeep.actors.supervision.errors import (
    SupervisionDeadlockError,
    SupervisorGaveUpError,
    SupervisorStoppedError,
)
from agentkeep.actors.supervision.messages import (
    Outcome,
    StartChild,
    TerminateChild,
    WhichChildren,
)
from agentkeep.actors.supervision.scheduling import Scheduler, default_scheduler
from agentkeep.actors.supervision.specs import (
    Backoff,
    ChildInfo,
    ChildSpec,
    RestartIntensity,
    Strategy,
)
from agentkeep.actors.supervision.supervised import ancestry_here, supervisors_busy_here

_TOKEN: Any = object()


def start_supervisor(
    name: str,
    *,
    strategy: Strategy = "one_for_one",
    children: Sequence[ChildSpec] = (),
    intensity: RestartIntensity | None = None,
    backoff: Backoff | None = None,
    on_give_up: Callable[[SupervisorGaveUpError], None] | None = None,
    scheduler: Scheduler | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> SupervisorRef:
    """Start a supervisor and its ``children`` (in order, before this returns).

    Started from a parent's child spec, the supervisor becomes that parent's child: when it
    gives up, its parent sees a child failure. Started anywhere else, it is a root: when it gives
    up, it stops and :meth:`SupervisorRef.wait_for_stop` returns the error.

    Args:
        name: Names the supervisor in logs and errors.
        strategy: ``one_for_one`` or ``rest_for_one`` (see
            :data:`~agentkeep.actors.supervision.specs.Strategy`).
        children: Started now, in order; the first that cannot start stops the ones before it
            and raises :class:`~agentkeep.actors.supervision.errors.ChildStartError`.
        intensity: Restart limit; default ``RestartIntensity()`` (3 in 5 s).
        backoff: Restart delays; default ``Backoff()`` (0.1 s doubling, at most 5 s).
        on_give_up: Called in the supervisor's thread once it gave up and stopped its
            children, before it stops. It must not wait on this supervisor. The parent
            supervisor, if any, hears of the failure anyway.
        scheduler: Runs delayed restarts and shutdown timeouts; default: one process-wide
            daemon thread. Tests pass a
            :class:`~agentkeep.actors.supervision.scheduling.ManualScheduler`.
        clock: Monotonic seconds, for the intensity window.

    Raises:
        ChildStartError: A child in ``children`` could not be started.
        DuplicateChildError: Two specs in ``children`` share an id.
    """
    if strategy not in get_args(Strategy):
        raise ValueError(f"strategy must be one of {get_args(Strategy)}, not {strategy!r}")
    outcome = Outcome()
    actor_ref = Supervisor.start(
        name=name,
        strategy=strategy,
        children=tuple(children),
        intensity=intensity if intensity is not None else RestartIntensity(),
        backoff=backoff if backoff is not None else Backoff(),
        scheduler=scheduler if scheduler is not None else default_scheduler(),
        clock=clock,
        on_give_up=on_give_up,
        outcome=outcome,
    )
    return SupervisorRef(actor_ref, name, outcome, _token=_TOKEN)


class SupervisorRef:
    """A running supervisor, safe to use from any thread. Got from :func:`start_supervisor`.

    Every call that waits takes ``timeout_seconds`` (``None``: as long as it takes) and raises
    :class:`TimeoutError` when it runs out. A call made once the supervisor stopped raises
    :class:`~agentkeep.actors.supervision.errors.SupervisorStoppedError`.

    Calls from inside the tree are safe: an actor under this supervisor (at any depth) may ask
    it anything, because the supervisor never blocks on a child while it runs. A call that
    would wait on the caller itself raises
    :class:`~agentkeep.actors.supervision.errors.SupervisionDeadlockError` instead: any call
    from the supervisor's own thread (a child's ``start``), ``terminate_child`` of the caller
    or of a supervisor above it, ``wait_for_stop`` from below. ``stop`` from below only asks.
    """

    __slots__ = ("_actor_ref", "_name", "_outcome")

    def __init__(
        self, actor_ref: pykka.ActorRef[Any], name: str, outcome: Outcome, *, _token: object
    ) -> None:
        if _token is not _TOKEN:
            raise TypeError("SupervisorRef has no public constructor; use start_supervisor")
        self._actor_ref = actor_ref
        self._name = name
        self._outcome = outcome

    def __repr__(self) -> str:
        return f"SupervisorRef(name={self._name!r}, alive={self.is_alive()})"

    @property
    def name(self) -> str:
        return self._name

    @property
    def actor_ref(self) -> pykka.ActorRef[Any]:
        """The supervisor actor's ref: what a parent's child spec ``start`` returns."""
        return self._actor_ref

    def is_alive(self) -> bool:
        return self._actor_ref.is_alive()

    def start_child(
        self, spec: ChildSpec, *, timeout_seconds: float | None = None
    ) -> pykka.ActorRef[Any]:
        """Start a child now and supervise it; it goes last in start order.

        Raises:
            DuplicateChildError: The supervisor already has a child with this id.
            ChildStartError: ``spec.start`` raised; the child is not added, and that does
                not count against the restart intensity.
        """
        ref: pykka.ActorRef[Any] = self._ask(StartChild(spec), timeout_seconds)
        return ref

    def terminate_child(self, child_id: str, *, timeout_seconds: float | None = None) -> None:
        """Stop a child normally and forget it; returns once it has stopped.

        A child does not terminate itself (it would wait for its own stop): it stops itself
        with ``self.stop()``, a normal exit (``transient`` and ``temporary`` children are then
        forgotten, a ``permanent`` one is restarted).

        Raises:
            UnknownChildError: No child has this id.
            SupervisionDeadlockError: The caller is that child, or runs under it.
        """
        if (self._actor_ref.actor_urn, child_id) in ancestry_here():
            raise SupervisionDeadlockError(
                f"child {child_id!r} of supervisor {self._name!r} would wait for its own stop"
            )
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        stopped: pykka.Future[None] = self._ask(TerminateChild(child_id), timeout_seconds)
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            stopped.get(timeout=remaining)
        except pykka.Timeout as exc:
            raise TimeoutError(f"child {child_id!r} did not stop in {timeout_seconds} s") from exc

    def which_children(self, *, timeout_seconds: float | None = None) -> list[ChildInfo]:
        """A snapshot of the children, in start order."""
        children: list[ChildInfo] = self._ask(WhichChildren(), timeout_seconds)
        return children

    def stop(self, *, timeout_seconds: float | None = None) -> None:
        """Stop every child in reverse start order, then the supervisor; a normal exit.

        Returns once it has stopped. Called from inside the tree (an actor under it, or its own
        thread), it only asks for the stop and returns: waiting would wait on the caller.
        """
        if self._is_inside():
            self._actor_ref.stop(block=False)
            return
        try:
            self._actor_ref.stop(block=True, timeout=timeout_seconds)
        except pykka.Timeout as exc:
            raise TimeoutError(f"supervisor {self._name!r} did not stop in time") from exc
        self._outcome.stopped.wait(timeout_seconds)

    @property
    def failure(self) -> BaseException | None:
        """Why the supervisor stopped, once it has: what it escalated, else ``None``."""
        return self._outcome.failure if self._outcome.stopped.is_set() else None

    def wait_for_stop(self, *, timeout_seconds: float | None = None) -> BaseException | None:
        """Block until the supervisor has stopped with all its children.

        Returns:
            The error it gave up with
            (:class:`~agentkeep.actors.supervision.errors.SupervisorGaveUpError`; any other
            exception is a bug in the supervisor itself), or ``None`` after a normal stop.

        Raises:
            TimeoutError: It was still running after ``timeout_seconds``.
            SupervisionDeadlockError: Called from inside the tree, which must stop first.
        """
        if self._is_inside() and not self._outcome.stopped.is_set():
            raise SupervisionDeadlockError(
                f"waiting for supervisor {self._name!r} to stop from an actor it must stop first"
            )
        if not self._outcome.stopped.wait(timeout_seconds):
            raise TimeoutError(f"supervisor {self._name!r} still running")
        return self._outcome.failure

    def _ask(self, message: object, timeout_seconds: float | None) -> Any:
        self._refuse_from_own_thread()
        try:
            return self._actor_ref.ask(message, timeout=timeout_seconds)
        except pykka.ActorDeadError as exc:
            raise SupervisorStoppedError(f"supervisor {self._name!r} has stopped") from exc
        except pykka.Timeout as exc:
            raise TimeoutError(
                f"supervisor {self._name!r} did not answer in {timeout_seconds} s"
            ) from exc

    def _refuse_from_own_thread(self) -> None:
        if (
            self._outcome.thread_ident == threading.get_ident()
            or self._actor_ref.actor_urn in supervisors_busy_here()
        ):
            raise SupervisionDeadlockError(
                f"supervisor {self._name!r} was called from its own thread (a child's start, "
                "on_give_up); it cannot answer until that returns"
            )

    def _is_inside(self) -> bool:
        """Whether this thread is the supervisor's, or an actor's anywhere under it."""
        urn = self._actor_ref.actor_urn
        return (
            self._outcome.thread_ident == threading.get_ident()
            or urn in supervisors_busy_here()
            or any(supervisor == urn for supervisor, _ in ancestry_here())
        )
