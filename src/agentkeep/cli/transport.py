"""Which transport a command runs on: the daemon's REST API, or the store itself.

Every command written over a :class:`~agentkeep.mcp.backend.Backend` runs one code path on
either :func:`open_backend` gives it: an :class:`~agentkeep.client.HttpBackend` when a daemon
owns the home (``daemon.json`` names a live pid that holds the store lock), else a
:class:`~agentkeep.mcp.backend.SystemBackend` over an ``AgentSystem`` this process opens
(nothing owed resumes: only what the command sends runs). A stale ``daemon.json`` (a
SIGKILLed daemon) is ignored, and said so on stderr at ``-v``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import click

from agentkeep.cli.context import CliState
from agentkeep.cli.output import EXIT_STORE_LOCKED, CliError
from agentkeep.cli.reading import open_reader
from agentkeep.cli.runtime import open_system
from agentkeep.cli.store_reader import StoreReader
from agentkeep.client import Daemon, HttpBackend, client_token, find_daemon
from agentkeep.features import Feature
from agentkeep.mcp.backend import Backend, SystemBackend

# Top-level commands that need to own the store (or run a process that does): refused while
# a daemon owns the home, with this exit code (the same as a held lock: the home is in use).
# `session start` without AGENT_ID and `session delete` (no REST operation: a session without
# a definition, releasing an id) and `demo` (not `demo --daemon`, which starts its own daemon
# in its own directory) refuse themselves, through `refuse_under_daemon`.
OWNER_ONLY = frozenset({"resume", "purge", "chaos", "serve"})


def daemon_of(state: CliState) -> Daemon | None:
    """The daemon owning the command's home, if any (a stale file is reported at ``-v``)."""
    lookup = find_daemon(state.home.path)
    if lookup.untrusted:  # a refusal for safety is always said, whatever the log level
        click.echo(f"warning: not using the daemon file: {lookup.stale}", err=True)
    elif lookup.stale is not None and state.log_level in ("info", "debug"):
        click.echo(f"note: ignoring a stale daemon file: {lookup.stale}", err=True)
    return lookup.daemon


def refuse_under_daemon(state: CliState, command: str, form: str = "") -> None:
    """Exit 3 if a daemon owns the home: ``command`` needs the store itself (a top-level
    command in :data:`OWNER_ONLY`, or one that says so itself, e.g. ``session delete``;
    ``form``: which of its forms, e.g. ``without AGENT_ID``)."""
    daemon = daemon_of(state)
    if daemon is None:
        return
    what = f"`agentkeep {command}`" + (f" {form}" if form else "")
    raise CliError(
        f"{what} needs the store itself, and the daemon (process "
        f"{daemon.pid}, {daemon.url}) owns {state.home.path}.",
        code="daemon_owns_home",
        hint="Stop the daemon (SIGTERM) and run the command again, or use the commands that "
        "go through it (`agentkeep agent …`, `agentkeep session …`, `agentkeep talk`).",
        exit_code=EXIT_STORE_LOCKED,
    )


def http_backend(state: CliState, daemon: Daemon) -> HttpBackend:
    """A client of ``daemon`` with the home's token (``$AGENTKEEP_DAEMON_TOKEN`` first)."""
    return HttpBackend(daemon.url, client_token(state.home.path))


def runs_on_after_exit(backend: Backend) -> bool:
    """Whether what the command sends goes on running once it exits (a daemon runs it);
    directly, an unwaited turn waits, durably, for the next ``agentkeep resume``."""
    return isinstance(backend, HttpBackend)


@contextmanager
def open_backend(
    state: CliState,
    *,
    create: bool = False,
    read_only: bool = False,
    run_sends: bool = True,
    cancel_timeout_seconds: float = 30.0,
    features: Sequence[Feature] = (),
) -> Iterator[Backend]:
    """The command's backend: the daemon's when one owns the home, else the store's.

    Args:
        state: The command's state (its home and output mode).
        create: Direct mode only: allow a home without a store yet (``agent create``).
        read_only: Direct mode only: the command only reads, so the store is read without
            its lock (:class:`~agentkeep.cli.store_reader.StoreReader`) and the command
            works while another process owns it.
        run_sends: Direct mode only: False accepts a sent turn without running it (this
            process exits at once; ``resume`` runs it). A daemon always runs it.
        cancel_timeout_seconds: Direct mode only: how long a cancel waits for a running
            turn to stop (the daemon bounds its own).
        features: Direct mode only: features of this process's system (a stream printer,
            the retry reporter).
    """
    daemon = daemon_of(state)
    if daemon is not None:
        backend = http_backend(state, daemon)
        try:
            yield backend
        finally:
            backend.close()
        return
    if read_only:
        with open_reader(state.home) as reader:
            yield StoreReader(reader)
        return
    with open_system(state.home, resume=False, create=create, features=features) as (system, _):
        try:
            yield SystemBackend(
                system, cancel_timeout_seconds=cancel_timeout_seconds, run_sends=run_sends
            )
        except BaseException:
            # The command failed (a wait past --timeout, Ctrl-C, a refusal): nobody waits for
            # what still runs here, so stop it now instead of letting close wait for it. It
            # stays owed (every step committed before it acted); `resume` continues it.
            system.close(timeout_seconds=0)
            raise
