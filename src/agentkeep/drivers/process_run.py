"""One harness process of a :class:`~agentkeep.drivers.process.ProcessDriver` turn: starting
it under its guard, feeding it the request, reading its output lines, and ending its process
group (docs/drivers.md, "The process driver").

Invariants:

- The harness runs under :mod:`~agentkeep.drivers.process_guard`, started in a new session:
  the guard leads the turn's process group, and the group dies with this process (the
  guard's lifeline), SIGKILL of this process included.
- The group is signalled only while the guard is not yet reaped (its exit is seen with
  ``WNOWAIT``), so the group id cannot name another process's group by reuse.
- Every way out -- the harness exited, a cancel, a timeout, a bad line, an error in the
  caller -- kills whatever is left of the group (SIGTERM, then SIGKILL after the grace, or
  SIGKILL at once once the harness exited) and reaps the guard.
- One thread does everything (a selector over stdin, stdout and stderr): no thread is left
  behind, and a harness that reads no input or writes without end cannot block it.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

#: The guard script, run by path (it imports nothing from agentkeep).
GUARD = Path(__file__).with_name("process_guard.py")
#: How often the loop looks at the cancel signal and the clock while nothing happens.
POLL_SECONDS = 0.05
#: How long the output of a killed group is read until its pipes close.
_DRAIN_SECONDS = 1.0
_CHUNK = 65536


class HarnessStartError(OSError):
    """The guard could not be started (its working directory, the Python executable)."""


class LineTooLongError(ValueError):
    """The harness wrote a stdout line over the limit."""


class HarnessProcess:
    """A harness running under its guard; see the module's invariants.

    Made by :meth:`start`; :meth:`pump` feeds and reads it; :meth:`stop` ends its group;
    :meth:`finish` reaps it. Use it as a context manager: leaving stops and reaps it.
    """

    def __init__(self, process: subprocess.Popen[bytes], lifeline: int, payload: bytes) -> None:
        self.process = process
        self._lifeline: int | None = lifeline
        self._payload = memoryview(payload)
        self._written = 0
        self._buffer = b""
        self.stderr_tail = b""
        self._selector = selectors.DefaultSelector()
        self._exited = False
        self._reaped = False
        assert process.stdin is not None
        assert process.stdout is not None
        assert process.stderr is not None
        for stream in (process.stdin, process.stdout, process.stderr):
            os.set_blocking(stream.fileno(), False)
        self._selector.register(process.stdin, selectors.EVENT_WRITE)
        self._selector.register(process.stdout, selectors.EVENT_READ)
        self._selector.register(process.stderr, selectors.EVENT_READ)

    @classmethod
    def start(
        cls,
        command: Sequence[str],
        *,
        cwd: Path | None,
        env: Mapping[str, str],
        payload: bytes,
        grace_seconds: float,
    ) -> HarnessProcess:
        """Start ``command`` under its guard, in a new session, with ``payload`` to write to
        its stdin.

        Raises:
            HarnessStartError: the guard could not be started (a missing ``cwd``...). A
                command that cannot be run makes the guard exit with status 127.
        """
        read_end, write_end = os.pipe()  # both close-on-exec; the guard gets read_end
        argv = [sys.executable, "-I", "-S", str(GUARD), str(read_end), repr(grace_seconds)]
        try:
            process = subprocess.Popen(
                [*argv, "--", *command],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=cwd,
                env=dict(env),
                start_new_session=True,
                pass_fds=(read_end,),
            )
        except OSError as error:
            os.close(write_end)
            raise HarnessStartError(error.errno, str(error)) from None
        finally:
            os.close(read_end)
        return cls(process, write_end, payload)

    def __enter__(self) -> HarnessProcess:
        return self

    def __exit__(self, *_: object) -> None:
        if not self._exited:
            self.stop(grace_seconds=0.0)
        self.finish()

    # -- running ---------------------------------------------------------------------------
    def pump(
        self,
        on_line: Callable[[bytes], None],
        *,
        should_stop: Callable[[], bool],
        max_line_bytes: int,
    ) -> bool:
        """Feed the payload and hand each stdout line to ``on_line`` until the harness
        exits (True) or ``should_stop()`` is true (False; nothing is stopped yet).

        Once the harness exited, the rest of its group is killed and its remaining output
        read (the lines too). ``on_line`` may raise: it escapes as is.

        Raises:
            LineTooLongError: a stdout line is over ``max_line_bytes``.
        """
        while True:
            if should_stop():
                return False
            self._step(POLL_SECONDS, on_line, max_line_bytes)
            if self._has_exited():
                self._exited = True
                self._signal(signal.SIGKILL)  # what it left running in its group
                self._drain(on_line, max_line_bytes)
                return True

    def stop(self, grace_seconds: float) -> None:
        """End the group: SIGTERM, then SIGKILL once the harness exited or ``grace_seconds``
        passed; output meanwhile is read and dropped."""
        self._close_stdin()
        self._signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_seconds
        while not self._has_exited() and time.monotonic() < deadline:
            self._step(min(POLL_SECONDS, max(0.0, deadline - time.monotonic())), None, 0)
        self._exited = True
        self._signal(signal.SIGKILL)
        self._drain(None, 0)

    def finish(self) -> int:
        """Reap the guard and let go of everything; its exit status (negative: the signal
        that ended it). Idempotent."""
        if not self._reaped:
            self._reaped = True
            self._close_stdin()
            for key in list(self._selector.get_map().values()):
                self._selector.unregister(key.fileobj)
            self._selector.close()
            for stream in (self.process.stdout, self.process.stderr):
                if stream is not None:
                    stream.close()
            if self._lifeline is not None:
                os.close(self._lifeline)
                self._lifeline = None
            self.process.wait()
        return self.process.returncode

    # -- one step of the selector ----------------------------------------------------------
    def _step(
        self, timeout: float, on_line: Callable[[bytes], None] | None, max_line_bytes: int
    ) -> None:
        if not self._selector.get_map():
            time.sleep(timeout)  # every pipe is closed: only the exit is left to see
            return
        for key, _ in self._selector.select(timeout):
            stream = key.fileobj
            if stream is self.process.stdin:
                self._write()
            elif stream is self.process.stdout:
                self._read_stdout(on_line, max_line_bytes)
            else:
                self._read_stderr()

    def _write(self) -> None:
        assert self.process.stdin is not None
        try:
            self._written += os.write(
                self.process.stdin.fileno(), self._payload[self._written : self._written + _CHUNK]
            )
        except BlockingIOError:
            return
        except BrokenPipeError:
            self._written = len(self._payload)  # it stopped reading: nothing more to give
        if self._written >= len(self._payload):
            self._close_stdin()  # EOF after the request

    def _close_stdin(self) -> None:
        stdin = self.process.stdin
        if stdin is not None and not stdin.closed:
            with contextlib.suppress(KeyError):
                self._selector.unregister(stdin)
            with contextlib.suppress(OSError):
                stdin.close()

    def _read_stdout(self, on_line: Callable[[bytes], None] | None, max_line_bytes: int) -> None:
        assert self.process.stdout is not None
        chunk = self._read(self.process.stdout)
        if chunk is None:
            return
        if not chunk:  # EOF: a last line without its newline is still a line
            rest, self._buffer = self._buffer, b""
            if rest.strip() and on_line is not None:
                on_line(rest)
            return
        if on_line is None:
            return  # stopping: output is dropped
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            if line.strip():
                on_line(line)
        if len(self._buffer) > max_line_bytes:
            raise LineTooLongError(f"a stdout line is over {max_line_bytes} bytes")

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        chunk = self._read(self.process.stderr)
        if chunk:
            self.stderr_tail = (self.stderr_tail + chunk)[-8192:]

    def _read(self, stream: IO[bytes]) -> bytes | None:
        """A chunk, ``b""`` at EOF (the stream is closed), None if nothing is ready."""
        try:
            chunk = os.read(stream.fileno(), _CHUNK)
        except BlockingIOError:
            return None
        if not chunk:
            self._selector.unregister(stream)
            stream.close()
        return chunk

    def _drain(self, on_line: Callable[[bytes], None] | None, max_line_bytes: int) -> None:
        """Read until the pipes close (the group is dead), at most ``_DRAIN_SECONDS``."""
        self._close_stdin()
        deadline = time.monotonic() + _DRAIN_SECONDS
        while self._selector.get_map() and time.monotonic() < deadline:
            self._step(max(0.0, deadline - time.monotonic()), on_line, max_line_bytes)

    # -- the process group -----------------------------------------------------------------
    def _has_exited(self) -> bool:
        """Whether the guard exited, without reaping it (its pid stays its group's)."""
        if self._exited:
            return True
        if hasattr(os, "waitid"):
            try:
                info = os.waitid(os.P_PID, self.process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:  # pragma: no cover - reaped elsewhere
                return True
            return info is not None and info.si_pid == self.process.pid
        return self.process.poll() is not None  # pragma: no cover - no waitid (macOS)

    def _signal(self, number: int) -> None:
        if self._reaped:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, number)


__all__ = ["GUARD", "HarnessProcess", "HarnessStartError", "LineTooLongError"]
