"""The process driver: runs a command-line agent harness as a child process per turn
(docs/drivers.md, "The process driver").

The protocol, one harness process per turn:

- **stdin**: the turn's :class:`~agentkeep.drivers.types.DriverRunRequest` as one JSON
  document (its wire names: ``revision``, ``session``, ``turn``, ``history``, ``input``,
  ``driverSessionId``) and a newline, then EOF.
- **stdout**: JSON lines. ``{"type": T, "data": {...}}`` is an event of the turn, committed
  through ``context.emit(T, data)`` before the next line is read (``text.delta`` is live
  text, ``message`` an assistant message; ``data`` defaults to ``{}``). One line
  ``{"type": "result", "message"?, "driverSessionId"?, "metadata"?}`` is the turn's result
  (the wire's ``DriverRunResult``), passed on as it is; no result line is a result of none.
- **stderr**: free text; its last 8 KiB are kept for the failure message.
- **exit status**: 0 completes the turn; anything else fails it, naming the status and the
  end of stderr.

Invariants:

- The turn's processes never outlive it: on cancel (``context.cancelled``, which also fires
  at the system's turn timeout and when it closes), at the driver's own ``timeoutSeconds``,
  on a bad line or a refused event, the process group gets SIGTERM, then SIGKILL after
  ``killGraceSeconds``; once the harness exits, what it left in its group is killed; and
  if this process dies, even by SIGKILL, the guard kills the group
  (:mod:`~agentkeep.drivers.process_guard`).
- Configuration comes from the constructor, or -- for a driver made without a ``command``
  -- from the definition's ``driver.config`` (``command``, ``cwd``, ``env``,
  ``timeoutSeconds``, ``killGraceSeconds``); other keys are the harness's, which reads them
  in ``request.revision``.
- A revision with an ``authRef`` has it resolved by the system's credential resolver
  (``context.credential()``) before the harness starts, and the secret is handed to the
  harness in its environment only (:data:`CREDENTIAL_ENV`), never on its stdin, in the
  request or in an event; an unresolvable reference fails the turn naming it, and no
  harness is started.
"""

from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from agentkeep.drivers.context import DriverContext
from agentkeep.drivers.errors import DriverError
from agentkeep.drivers.process_run import HarnessProcess, HarnessStartError, LineTooLongError
from agentkeep.drivers.types import DriverResult, DriverRunRequest

#: The id of the driver ``agentkeep.drivers.process`` exports (``--drivers
#: agentkeep.drivers.process``).
PROCESS_DRIVER_ID = "process"
#: The type of the stdout line that carries the turn's result.
RESULT = "result"
#: The harness's environment variable holding the secret of its revision's ``authRef``.
CREDENTIAL_ENV = "AGENTKEEP_CREDENTIAL"
DEFAULT_KILL_GRACE_SECONDS = 2.0
DEFAULT_MAX_LINE_BYTES = 8 * 1024 * 1024
_STDERR_IN_ERROR = 2000


class ProcessDriverError(DriverError):
    """A process driver turn failed: its configuration, its harness's exit status, a line
    the harness wrote, or its timeout (the message says which)."""

    code = "process_driver_error"


@dataclass(frozen=True, kw_only=True)
class ProcessSettings:
    """How one turn's harness runs (from the constructor or the definition's config)."""

    command: tuple[str, ...]
    cwd: Path | None
    env: Mapping[str, str]
    timeout_seconds: float | None
    kill_grace_seconds: float


class ProcessDriver:
    """A driver that runs a command-line harness per turn (see the module docstring).

    Args:
        id: The driver id definitions name (``driver.id``).
        command: The harness's argv. Given, the driver always runs it, and the definition's
            ``driver.config`` is only the harness's to read; None (the default), every
            definition names its own in ``driver.config.command`` -- then whoever can create
            a definition can run commands as this process's user: register such a driver
            only where that is meant.
        cwd: The harness's working directory (default: the definition's
            ``workspace.cwd``, else this process's).
        env: Variables added to this process's environment for the harness.
        timeout_seconds: A turn whose harness runs longer fails (None: only the system's
            turn timeout applies).
        kill_grace_seconds: Between SIGTERM and SIGKILL when the group is ended.
        max_line_bytes: The longest stdout line accepted.
    """

    def __init__(
        self,
        id: str = PROCESS_DRIVER_ID,
        *,
        command: Sequence[str] | None = None,
        cwd: str | Path | None = None,
        env: Mapping[str, str] | None = None,
        timeout_seconds: float | None = None,
        kill_grace_seconds: float = DEFAULT_KILL_GRACE_SECONDS,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    ) -> None:
        self.id = id
        self._command = None if command is None else _command(list(command), "command")
        self._cwd = None if cwd is None else Path(cwd)
        self._env = dict(_env(dict(env or {}), "env"))
        self._timeout = _seconds(timeout_seconds, "timeout_seconds", optional=True)
        self._grace = _grace(kill_grace_seconds, "kill_grace_seconds")
        self._max_line_bytes = max_line_bytes

    def settings(self, request: DriverRunRequest) -> ProcessSettings:
        """How ``request``'s harness runs.

        Raises:
            ProcessDriverError: the definition's ``driver.config`` is not usable.
        """
        definition = request.revision.definition
        workspace = Path(definition.workspace.cwd) if definition.workspace.cwd else None
        if self._command is not None:
            return ProcessSettings(
                command=self._command,
                cwd=self._cwd or workspace,
                env=self._env,
                timeout_seconds=self._timeout,
                kill_grace_seconds=self._grace,
            )
        config = definition.driver.config
        if "command" not in config:
            raise ProcessDriverError(
                f'driver "{self.id}" needs driver.config.command in definition '
                f'"{definition.id}": the harness\'s argv, e.g. ["python", "harness.py"]'
            )
        cwd = config.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise ProcessDriverError(f"driver.config.cwd must be a string, got {cwd!r}")
        timeout = _seconds(config.get("timeoutSeconds", self._timeout), "timeoutSeconds", True)
        grace = config.get("killGraceSeconds", self._grace)
        return ProcessSettings(
            command=_command(config["command"], "driver.config.command"),
            cwd=Path(cwd) if cwd else self._cwd or workspace,
            env={**self._env, **_env(config.get("env", {}), "driver.config.env")},
            timeout_seconds=timeout,
            kill_grace_seconds=_grace(grace, "killGraceSeconds"),
        )

    def run(self, request: DriverRunRequest, context: DriverContext) -> DriverResult | None:
        """Run ``request``'s harness to its end (see the module docstring).

        Raises:
            ProcessDriverError: bad configuration, a harness that could not start, failed,
                wrote a bad line or ran past ``timeoutSeconds``.
            CredentialUnavailableError: the revision's ``authRef`` cannot be resolved.
            DriverCancelledError: the turn was cancelled (its group was ended first).
            InvalidDriverEventError / DriverContextClosedError: from ``context.emit``.
        """
        settings = self.settings(request)
        context.raise_if_cancelled()
        credential = context.credential()  # CredentialUnavailableError: no harness starts
        secret = {} if credential is None else {CREDENTIAL_ENV: credential.secret}
        reader = _Lines(context)
        deadline = (
            None
            if settings.timeout_seconds is None
            else time.monotonic() + settings.timeout_seconds
        )
        try:
            harness = HarnessProcess.start(
                settings.command,
                cwd=settings.cwd,
                env={**os.environ, **settings.env, **secret},
                payload=msgspec.json.encode(request) + b"\n",
                grace_seconds=settings.kill_grace_seconds,
            )
        except HarnessStartError as error:
            raise ProcessDriverError(
                f"the harness {list(settings.command)} could not start"
                f"{f' in {settings.cwd}' if settings.cwd else ''}: {error.strerror}"
            ) from None
        with harness:
            try:
                exited = harness.pump(
                    reader.take,
                    should_stop=lambda: (
                        context.cancelled or (deadline is not None and time.monotonic() >= deadline)
                    ),
                    max_line_bytes=self._max_line_bytes,
                )
            except BaseException as error:
                harness.stop(settings.kill_grace_seconds)
                if isinstance(error, LineTooLongError):
                    raise ProcessDriverError(f"the harness wrote a bad line: {error}") from None
                raise
            if not exited:
                harness.stop(settings.kill_grace_seconds)
                context.raise_if_cancelled()
                raise ProcessDriverError(
                    f"the harness ran longer than timeoutSeconds ({settings.timeout_seconds:g})"
                    "; its process group was killed"
                )
            status = harness.finish()
        if status != 0:
            raise ProcessDriverError(
                f"the harness {list(settings.command)} {_status(status)}"
                f"{_stderr(harness.stderr_tail)}"
            )
        return reader.result


class _Lines:
    """The stdout protocol: each line an event (emitted) or the result (kept)."""

    def __init__(self, context: DriverContext) -> None:
        self._context = context
        self.result: DriverResult | None = None
        self._done = False

    def take(self, line: bytes) -> None:
        try:
            value = msgspec.json.decode(line)
        except msgspec.DecodeError:
            raise _bad(line, "it is not JSON") from None
        if not isinstance(value, dict) or not isinstance(value.get("type"), str):
            raise _bad(line, 'it is not a JSON object with a string "type"')
        if self._done:
            raise _bad(line, "it came after the result line")
        kind = value.pop("type")
        if kind == RESULT:
            self._done = True
            try:
                self.result = msgspec.convert(value, DriverResult)
            except msgspec.ValidationError as error:
                raise _bad(line, f"its result is not a DriverRunResult: {error}") from None
            return
        data = value.get("data", {})
        self._context.emit(kind, data)


def _bad(line: bytes, why: str) -> ProcessDriverError:
    text = line.decode("utf-8", "replace")
    shown = text if len(text) <= 200 else text[:200] + "…"
    return ProcessDriverError(f"the harness wrote a bad line ({why}): {shown}")


def _command(value: object, name: str) -> tuple[str, ...]:
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(part, str) and part for part in value)
    ):
        raise ProcessDriverError(
            f"{name} must be a non-empty list of non-empty strings (the argv), got {value!r}"
        )
    return tuple(value)


def _env(value: object, name: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ProcessDriverError(f"{name} must be an object of strings, got {value!r}")
    return value


def _seconds(value: object, name: str, optional: bool) -> float | None:
    if value is None and optional:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and optional)
    ):
        raise ProcessDriverError(f"{name} must be a finite number of seconds, got {value!r}")
    return float(value)


def _grace(value: object, name: str) -> float:
    seconds = _seconds(value, name, optional=False)
    assert seconds is not None  # not optional
    return seconds


def _status(status: int) -> str:
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"was killed by {name}"
    if status == 127:
        return "exited with status 127 (could it be run? see its stderr)"
    return f"exited with status {status}"


def _stderr(tail: bytes) -> str:
    text = tail.decode("utf-8", "replace").strip()
    if not text:
        return ""
    if len(text) > _STDERR_IN_ERROR:
        text = "…" + text[-_STDERR_IN_ERROR:]
    return f"; its stderr ends: {text}"


#: The driver ``--drivers agentkeep.drivers.process`` loads: id ``process``, its command
#: from each definition's ``driver.config``.
driver = ProcessDriver()

__all__ = [
    "DEFAULT_KILL_GRACE_SECONDS",
    "PROCESS_DRIVER_ID",
    "ProcessDriver",
    "ProcessDriverError",
    "ProcessSettings",
    "driver",
]
