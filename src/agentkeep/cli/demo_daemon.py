"""``agentkeep demo --daemon``: the daemon's event stream survives a SIGKILL, in well under 30 s.

1. Start ``agentkeep serve --port 0`` as a real process in a fresh state directory (its URL
   from ``daemon.json``, its token from ``daemon.token``), with a slowed-down local model
   (``providers.toml``) so a turn stays in flight for a few seconds.
2. Over REST (httpx): create a definition and a session, and send a turn with an
   ``Idempotency-Key`` without waiting (202).
3. Follow the session's SSE stream, printing events as they arrive; when the stream shows
   the turn's first tool result (the answer still to come), SIGKILL the daemon.
4. Restart ``serve`` on the same directory and reconnect with ``Last-Event-ID`` = the last id
   received: the stream resumes, and the turn — resumed by the native driver, never
   interrupted — completes.
5. Send the same message with the same key again: the same turn comes back (duplicate).
6. Check it against the ledger read back over REST (every sequence exactly once, in order,
   no gap), SIGTERM the daemon, and print PASS/FAIL.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from agentkeep.cli.context import CliState
from agentkeep.cli.output import EXIT_BAD_INPUT, EXIT_FAILURE, CliError


def _choose_home(directory: Path | None) -> Path:
    if directory is None:
        return Path(tempfile.mkdtemp(prefix="agentkeep-demo-daemon-"))
    if directory.exists() and any(directory.iterdir()):
        raise CliError(
            f"{directory} is not empty: the demo needs a fresh state directory.",
            code="demo_dir_not_empty",
            hint="Pass a new directory to --dir, or leave it out (a temporary one is made).",
            exit_code=EXIT_BAD_INPUT,
        )
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def demo_daemon(state: CliState, directory: Path | None) -> None:
    """``agentkeep demo --daemon``: the steps above, in ``directory`` (new or empty) or a new
    temporary one; exits 1 if a check failed."""
    # Imported here: httpx and the steps load only when this command runs.
    from agentkeep.cli.demo_daemon_steps import run_demo

    if not run_demo(_choose_home(directory), state):
        raise SystemExit(EXIT_FAILURE)
