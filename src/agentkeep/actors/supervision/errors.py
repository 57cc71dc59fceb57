"""Errors of the supervision library, each an :class:`~agentkeep.errors.AgentkeepError`."""

from __future__ import annotations

from agentkeep.errors import AgentkeepError


class SupervisionError(AgentkeepError):
    """Base class of the supervision errors."""

    code = "supervision_error"


class SupervisorGaveUpError(SupervisionError):
    """A supervisor exceeded its restart intensity, stopped its children and gave up.

    This is what a supervisor escalates: its parent sees it as the supervisor's own failure,
    the root surfaces it through ``SupervisorRef.failure`` and ``wait_for_stop``. ``__cause__``
    is the failure of the child whose exit broke the limit (``None`` when that child stopped
    normally, or when its exit reason is unknown).

    Attributes:
        supervisor: The name of the supervisor that gave up.
        child_id: The child whose exit broke the limit.
    """

    code = "supervisor_gave_up"

    def __init__(self, supervisor: str, child_id: str, *, max_restarts: int, period_seconds: float):
        super().__init__(
            f"supervisor {supervisor!r} gave up: child {child_id!r} needed a restart beyond "
            f"{max_restarts} in {period_seconds:g} s"
        )
        self.supervisor = supervisor
        self.child_id = child_id

    def __reduce__(self) -> tuple[object, ...]:
        # Keep the keyword-only arguments across pickling (and so across processes).
        return (_rebuild_gave_up, (self.args[0], self.supervisor, self.child_id))


def _rebuild_gave_up(message: str, supervisor: str, child_id: str) -> SupervisorGaveUpError:
    error = SupervisorGaveUpError.__new__(SupervisorGaveUpError)
    SupervisionError.__init__(error, message)
    error.supervisor = supervisor
    error.child_id = child_id
    return error


class SupervisorStoppedError(SupervisionError):
    """The supervisor has stopped (or is stopping) and cannot do what was asked."""

    code = "supervisor_stopped"


class UnknownChildError(SupervisionError):
    """The supervisor has no child with that id."""

    code = "unknown_child"


class DuplicateChildError(SupervisionError):
    """The supervisor already has a child with that id."""

    code = "duplicate_child"


class ChildStartError(SupervisionError):
    """A child spec's ``start`` raised or returned something that is not an actor ref.

    ``__cause__`` holds what ``start`` raised.

    Attributes:
        child_id: The child that could not be started.
    """

    code = "child_start_failed"

    def __init__(self, child_id: str, reason: str) -> None:
        super().__init__(f"child {child_id!r} could not be started: {reason}")
        self.child_id = child_id

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_start_error, (self.args[0], self.child_id))


def _rebuild_start_error(message: str, child_id: str) -> ChildStartError:
    error = ChildStartError.__new__(ChildStartError)
    SupervisionError.__init__(error, message)
    error.child_id = child_id
    return error


class SupervisionDeadlockError(SupervisionError):
    """A call to a supervisor was refused because it would have waited on the caller itself.

    From the supervisor's own thread (a child's ``start``, ``on_give_up``), the supervisor is
    busy running the caller; ``terminate_child`` of the calling actor (or of a supervisor
    above it) waits for the caller to stop, which it cannot while it waits.
    """

    code = "supervision_deadlock"
