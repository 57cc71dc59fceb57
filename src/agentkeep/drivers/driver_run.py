"""One run of a driver turn: the state its runner, its child and a cancelling caller share
(:class:`RunState`), and the one-shot child actor whose thread calls ``driver.run``
(:class:`DriverRunActor`). :mod:`agentkeep.drivers.runner` drives both.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pykka

from agentkeep.actors.children import OneShotChild
from agentkeep.drivers.context import DriverContext
from agentkeep.drivers.errors import InvalidDriverEventError
from agentkeep.drivers.types import Driver, DriverRunRequest


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
            context.fire(reason)

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
