"""Fault points for chaos testing: fail, or kill the process, at store operation N.

Off by default. Every operation the writer performs on its connection counts as one
operation: ``BEGIN``, each ``SAVEPOINT``/``RELEASE`` (a group of several work items; a lone
item runs without them), each statement a :class:`Transaction`
method runs, ``COMMIT``, the point right after ``COMMIT`` returned but before any caller is
answered (``after_commit``), and each idle checkpoint. Operations are numbered from 1 in the
order the writer performs them, counted from the moment the writer starts (schema migrations
at open are not counted), so every index is reachable: inside a group commit, between two
savepoints, and after COMMIT.

Three modes:

- ``kill``: the process sends itself ``SIGKILL`` at operation N (a real crash: nothing after
  it runs, not even ``finally`` blocks).
- ``crash``: operation N and every later one raise :class:`InjectedFaultError`, as if the
  process had died there; reopen the store to "restart".
- ``flaky``: only operation N raises; the store works again afterwards.
- ``writer``: operation N makes the writer actor itself fail (a bug outside any one
  transaction): its callers are answered, and a supervised writer is restarted (see
  ``agentkeep.actors.tree``); unsupervised, the store closes.

Configure with ``Store.open(faults=FaultPlan(at=N, mode="kill"))`` or, for a child process,
with the environment: ``AGENTKEEP_FAULT_AT=N`` and ``AGENTKEEP_FAULT_MODE=kill|crash|flaky``
(default ``crash``).
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Literal, TypeAlias

import msgspec

from agentkeep.errors import StoreError
from agentkeep.logs import get_logger

log = get_logger(__name__)

FaultMode: TypeAlias = Literal["kill", "crash", "flaky", "writer"]
FAULT_MODES: tuple[FaultMode, ...] = ("kill", "crash", "flaky", "writer")
FAULT_AT_ENV = "AGENTKEEP_FAULT_AT"
FAULT_MODE_ENV = "AGENTKEEP_FAULT_MODE"


class InjectedFaultError(StoreError):
    """A fault point fired: the store failed on purpose (chaos testing only)."""

    code = "injected_fault"

    def __init__(self, operation: int, label: str) -> None:
        super().__init__(f"Injected fault at store operation {operation} ({label}).")
        self.operation = operation
        self.label = label


class InjectedWriterCrashError(InjectedFaultError):
    """A ``writer`` fault: the writer does not treat it as one work item's failure but lets
    it end the writer actor, as a bug in the writer would."""

    code = "injected_writer_crash"


def end_writer_if_injected(error: BaseException) -> None:
    """A ``writer`` fault is not one item's failure: let it end the actor (chaos testing)."""
    if isinstance(error, InjectedWriterCrashError):
        raise error


class FaultPlan(msgspec.Struct, frozen=True, kw_only=True):
    """Where and how the store should fail.

    Attributes:
        at: The 1-based store operation that fails (or kills the process).
        mode: ``kill``, ``crash`` or ``flaky`` (see the module docstring).
    """

    at: int
    mode: FaultMode = "crash"

    def __post_init__(self) -> None:
        if self.at < 1:
            raise ValueError(f"fault operation index must be >= 1, got {self.at}")
        if self.mode not in FAULT_MODES:
            raise ValueError(f"unknown fault mode {self.mode!r}; expected one of {FAULT_MODES}")

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> FaultPlan | None:
        """The plan ``AGENTKEEP_FAULT_AT`` / ``AGENTKEEP_FAULT_MODE`` describe, or None."""
        env = os.environ if environ is None else environ
        raw_at = env.get(FAULT_AT_ENV, "").strip()
        if not raw_at:
            return None
        mode = env.get(FAULT_MODE_ENV, "crash").strip() or "crash"
        if mode not in FAULT_MODES:
            raise ValueError(f"{FAULT_MODE_ENV}={mode!r}; expected one of {FAULT_MODES}")
        return cls(at=int(raw_at), mode=mode)


class FaultInjector:
    """Counts store operations and fires the plan's fault at its index.

    Only the writer's thread calls :meth:`tick`.
    """

    def __init__(self, plan: FaultPlan | None) -> None:
        self._plan = plan
        self._lock = threading.Lock()
        self._operations = 0
        self._crashed = False

    @property
    def plan(self) -> FaultPlan | None:
        return self._plan

    @property
    def operations(self) -> int:
        """How many operations have been counted so far."""
        return self._operations

    @property
    def crashed(self) -> bool:
        """True once a ``crash``-mode fault fired (every later operation fails)."""
        with self._lock:
            return self._crashed

    def tick(self, label: str) -> None:
        """Count one operation; raise (or kill the process) if the plan says so.

        Args:
            label: What the operation is (a statement's SQL, or a name like "after_commit");
                only its first word is reported.

        Raises:
            InjectedFaultError: at the planned operation, and in ``crash`` mode after it.
        """
        # Hot path (every statement the writer runs): only the writer's thread ticks, so a
        # plain increment is safe; readers of ``operations`` see a recent value.
        self._operations += 1
        if self._plan is None and not self._crashed:
            return
        self._fire(self._operations, label.split(None, 1)[0] if label else label)

    def _fire(self, number: int, label: str) -> None:
        with self._lock:
            plan = self._plan
            if self._crashed:
                raise InjectedFaultError(number, label)
            if plan is None or number != plan.at:
                return
            if plan.mode == "crash":
                self._crashed = True
        log.warning("store_fault_injected", operation=number, label=label, mode=plan.mode)
        if plan.mode == "kill":
            # A real crash: no cleanup, no flush, no finally blocks.
            os.kill(os.getpid(), signal.SIGKILL)
        if plan.mode == "writer":
            raise InjectedWriterCrashError(number, label)
        raise InjectedFaultError(number, label)
