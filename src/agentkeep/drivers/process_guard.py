"""The guard a :class:`~agentkeep.drivers.process.ProcessDriver` runs each harness under.

Standard library only: it is run as a script by path (``python -I -S process_guard.py
LIFELINE_FD GRACE -- COMMAND...``), never imported by agentkeep, so it starts in a few
milliseconds.

The driver starts it in a new session, so it leads the turn's process group; it starts the
harness (``COMMAND``) in that group and ends when the harness does, with the harness's exit
status (a death by a signal is re-raised on itself, so the driver sees the same status).

Its **lifeline** is the read end of a pipe whose write end only the driver's process holds.
When it reads EOF -- the driver closed it, or the driver's process died, SIGKILL included
(the kernel closes a dead process's descriptors) -- the guard ends the whole group:
SIGTERM, then SIGKILL once the harness exited or ``GRACE`` seconds passed, itself included.
So no process of the group outlives the process that started it, whatever the harness does
(short of leaving the group with ``setsid``). The guard ignores a SIGTERM sent to the group
(the driver's cancel is for the harness): it waits for the harness and reports its status;
one that comes before the harness started means it never starts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

_lock = threading.Lock()
_cut = False  # the lifeline reached EOF: the watcher ends the group (and this process)
_harness_exited = threading.Event()
_terminated = False  # a SIGTERM came (before the harness started, it never starts)


def _note(_signum: int, _frame: object) -> None:
    global _terminated
    _terminated = True


def _watch(fd: int, grace: float) -> None:
    global _cut
    while os.read(fd, 1):
        pass  # nobody writes: a read returns only at EOF
    with _lock:
        _cut = True
    try:
        os.killpg(0, signal.SIGTERM)
        _harness_exited.wait(grace)
    finally:
        os.killpg(0, signal.SIGKILL)  # the stragglers and this guard


def main(argv: list[str]) -> int:
    """Run the harness ``argv[4:]`` under the guard (see the module docstring); the exit
    status to end with (the harness's)."""
    if len(argv) < 5 or argv[3] != "--":
        sys.stderr.write("usage: process_guard.py LIFELINE_FD GRACE -- COMMAND...\n")
        return 2
    fd, grace, command = int(argv[1]), float(argv[2]), argv[4:]
    os.set_inheritable(fd, False)
    signal.signal(signal.SIGTERM, _note)  # reset to the default in the harness by exec
    threading.Thread(target=_watch, args=(fd, grace), daemon=True).start()
    with _lock:
        if _cut:
            threading.Event().wait()  # the watcher is ending the group
        if _terminated:
            return 128 + signal.SIGTERM  # stopped before it started: nothing to run
        try:
            pid = os.posix_spawnp(command[0], command, dict(os.environ))
        except OSError as error:
            sys.stderr.write(f"agentkeep process driver: cannot run {command[0]!r}: {error}\n")
            return 127
    # The harness has the pipes; the guard lets go of them, so their ends see the harness's.
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    _, status = os.waitpid(pid, 0)
    _harness_exited.set()
    with _lock:
        if _cut:
            threading.Event().wait()  # the watcher kills the group, this guard included
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        with contextlib.suppress(OSError, ValueError):  # SIGKILL, SIGSTOP: only the default
            signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
        return 128 + number  # a signal whose default is not to terminate
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
