"""What a supervisor is told (requests, timers) and how its end is seen from outside."""

from __future__ import annotations

import threading

import msgspec

from agentkeep.actors.supervision.specs import ChildSpec


class StartChild(msgspec.Struct, frozen=True):
    """Asked: start and supervise a child; answered with its ref."""

    spec: ChildSpec


class TerminateChild(msgspec.Struct, frozen=True):
    """Asked: stop and forget a child; answered with a future set once it stopped."""

    child_id: str


class WhichChildren(msgspec.Struct, frozen=True):
    """Asked: a snapshot of the children."""


class RestartDue(msgspec.Struct, frozen=True):
    """Told by the scheduler: a backoff delay is over (stale unless the ticket matches)."""

    child_id: str | None  # None: the rest_for_one group
    ticket: int


class ShutdownTimedOut(msgspec.Struct, frozen=True):
    """Told by the scheduler: a child asked to stop did not within its timeout."""

    child_id: str
    actor_urn: str


class Outcome:
    """How a supervisor ended, readable from any thread once ``stopped`` is set."""

    def __init__(self) -> None:
        self.stopped = threading.Event()
        self.failure: BaseException | None = None
        self.thread_ident: int | None = None  # the supervisor's own thread, once it runs

    def finish(self, failure: BaseException | None) -> None:
        self.failure = failure
        self.stopped.set()
