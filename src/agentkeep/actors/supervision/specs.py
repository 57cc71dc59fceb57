"""What a supervisor is told about its children, and what it tells back: immutable values."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal, get_args

import msgspec
import pykka

RestartType = Literal["permanent", "transient", "temporary"]
"""When a child is restarted after it exits (Erlang/OTP's ``restart`` of a child spec).

- ``permanent``: after any exit, normal or not.
- ``transient``: only after an abnormal exit (a failure); a normal stop removes the child.
- ``temporary``: never; any exit removes the child.
"""

Strategy = Literal["one_for_one", "rest_for_one"]
"""What a supervisor restarts when a child must be restarted.

- ``one_for_one``: that child only.
- ``rest_for_one``: that child and every child started after it: the later ones are stopped
  in reverse start order, then all of them are started again in start order.
"""

ChildStatus = Literal["running", "stopping", "restarting"]
"""``restarting``: the child has exited and waits for its restart (backoff, or its group)."""

_RESTART_TYPES: frozenset[str] = frozenset(get_args(RestartType))


class ChildSpec(msgspec.Struct, frozen=True, kw_only=True):
    """How to start one child and when to restart it.

    Attributes:
        id: Unique among the supervisor's children.
        start: Starts a new incarnation of the child and returns its ref. Called in the
            supervisor's thread (or, for the children given to ``start_supervisor``, in the
            thread that starts the supervisor). It must not wait on its own supervisor. A
            :class:`~agentkeep.actors.supervisor.SupervisedActor` constructed by it reports its
            exits precisely; any other actor is watched, and every exit the supervisor did not
            ask for counts as abnormal (pykka keeps no exit reason).
        restart: See :data:`RestartType`.
        shutdown_timeout_seconds: How long the supervisor waits for the child to stop when it
            stops it; ``None`` waits as long as it takes (use it for a child that is itself a
            supervisor, whose own children are bounded). Pykka cannot kill a thread: after the
            timeout the supervisor logs ``child_shutdown_timed_out`` and goes on without it.
    """

    id: str
    start: Callable[[], pykka.ActorRef[Any]]
    restart: RestartType = "permanent"
    shutdown_timeout_seconds: float | None = 5.0

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError("a child spec needs a non-empty id")
        if self.restart not in _RESTART_TYPES:
            raise ValueError(
                f"restart must be one of {sorted(_RESTART_TYPES)}, not {self.restart!r}"
            )
        timeout = self.shutdown_timeout_seconds
        if timeout is not None and not (timeout >= 0 and math.isfinite(timeout)):
            raise ValueError(f"shutdown_timeout_seconds must be finite and >= 0, not {timeout}")


class RestartIntensity(msgspec.Struct, frozen=True, kw_only=True):
    """At most ``max_restarts`` restarts within any ``period_seconds``; one more and the
    supervisor gives up (stops its children and escalates).

    ``max_restarts=0`` gives up at the first exit that would need a restart.
    """

    max_restarts: int = 3
    period_seconds: float = 5.0

    def __post_init__(self) -> None:
        if self.max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, not {self.max_restarts}")
        if not (self.period_seconds > 0 and math.isfinite(self.period_seconds)):
            raise ValueError(f"period_seconds must be finite and > 0, not {self.period_seconds}")


class Backoff(msgspec.Struct, frozen=True, kw_only=True):
    """Delay before a restart: exponential per child, capped.

    The n-th restart of a child within the intensity period (n counted from 0) waits
    ``min(max_seconds, initial_seconds * multiplier ** n)``. ``Backoff(initial_seconds=0)``
    restarts at once.
    """

    initial_seconds: float = 0.1
    multiplier: float = 2.0
    max_seconds: float = 5.0

    def __post_init__(self) -> None:
        for name in ("initial_seconds", "max_seconds"):
            value = getattr(self, name)
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be finite and >= 0, not {value}")
        if not (self.multiplier >= 1 and math.isfinite(self.multiplier)):
            raise ValueError(f"multiplier must be finite and >= 1, not {self.multiplier}")

    def delay_seconds(self, previous_restarts: int) -> float:
        """The delay before a child's restart, given its restarts earlier in the period."""
        delay = self.initial_seconds
        # Grow step by step, not with ``**``: a long storm must not overflow a float. The
        # loop is short, the count is bounded by the restart intensity.
        for _ in range(previous_restarts):
            if delay >= self.max_seconds:
                break
            delay *= self.multiplier
        return min(delay, self.max_seconds)


class ChildInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of one child, as :meth:`SupervisorRef.which_children` lists it.

    Attributes:
        id: The child's id.
        actor_ref: The running incarnation; ``None`` while the child is ``restarting``.
        restart: The child's restart type.
        status: See :data:`ChildStatus`.
    """

    id: str
    actor_ref: pykka.ActorRef[Any] | None
    restart: RestartType
    status: ChildStatus
