"""``agentkeep demo-daemon``: the daemon's event stream survives a SIGKILL, in well under 30 s.

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

import click

from agentkeep.cli.context import CliState, pass_state
from agentkeep.cli.output import EXIT_BAD_INPUT, EXIT_FAILURE, CliError


def _explicit_home(ctx: click.Context) -> bool:
    return ctx.find_root().params.get("home") is not None


def _choose_home(ctx: click.Context, state: CliState) -> Path:
    if not _explicit_home(ctx):
        return Path(tempfile.mkdtemp(prefix="agentkeep-demo-daemon-"))
    home = state.home.path
    if home.exists() and any(home.iterdir()):
        raise CliError(
            f"{home} is not empty: the demo needs a fresh state directory.",
            code="demo_dir_not_empty",
            hint="Pass a new directory to --home, or leave it out (a temporary one is made).",
            exit_code=EXIT_BAD_INPUT,
        )
    home.mkdir(parents=True, exist_ok=True)
    return home


@click.command(name="demo-daemon")
@click.pass_context
@pass_state
def demo_daemon(state: CliState, ctx: click.Context) -> None:
    """Show the daemon's event stream resuming across a SIGKILL of `agentkeep serve`.

    Runs in a new temporary state directory unless --home names a new or empty one.
    """
    # Imported here: httpx and the steps load only when this command runs.
    from agentkeep.cli.demo_daemon_steps import run_demo

    if not run_demo(_choose_home(ctx, state), state):
        raise SystemExit(EXIT_FAILURE)
