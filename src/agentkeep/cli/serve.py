"""``agentkeep serve``: the daemon (REST + SSE) over the state directory (``docs/daemon.md``).

It owns the state directory while it runs (the store's lock), so other commands exit 3 until
it stops. Access logs go to stderr (``info`` unless ``--log-level`` says otherwise); stdout
gets, once it listens, the URL and a line with the console's one-time sign-in link (with
``--json``: one JSON line, the link as ``console``). The token file is written
before the store is opened, so before the daemon listens; ``--ready-file PATH`` is written
(atomically) only once the daemon listens, ``daemon.json`` and the token exist: a script
waits for PATH instead of sleeping.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import click
import msgspec

from agentkeep.cli.context import CliState, drivers_after, pass_state
from agentkeep.cli.logs import configure_logging
from agentkeep.cli.output import EXIT_BAD_INPUT, CliError
from agentkeep.cli.runtime import Home, open_system, partition_opener
from agentkeep.drivers.types import Driver
from agentkeep.errors import StoreUnavailableError
from agentkeep.partitions import MAX_PARTITIONS
from agentkeep.persistence.postgres.connection import is_postgres_url
from agentkeep.server import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    TOKEN_ENV,
    TOKEN_FILE,
    DaemonConfigError,
    RunningServer,
    ServeOptions,
    is_loopback,
    load_token,
    make_home_private,
    run_daemon,
)
from agentkeep.server.daemon import write_json_atomically


@click.command()
@click.option("--host", default=DEFAULT_HOST, show_default=True, help="The address to bind.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="The port; 0 picks a free one (printed).",
)
@click.option(
    "--token-file",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help=f"Read the token from this file (mode 0600) instead of $HOME/{TOKEN_FILE}.",
)
@click.option(
    "--no-auth",
    is_flag=True,
    help="Serve without a token (refused unless the address is loopback).",
)
@click.option(
    "--allow-host",
    multiple=True,
    help="Another accepted Host header value (name or name:port); repeatable.",
)
@click.option(
    "--allow-origin",
    multiple=True,
    help="Another accepted Origin (scheme://host:port); repeatable. No CORS headers are sent.",
)
@click.option(
    "--heartbeat",
    "heartbeat_seconds",
    type=click.FloatRange(0.05, 3600),
    default=15.0,
    show_default=True,
    help="Seconds between SSE heartbeat comments.",
)
@click.option(
    "--stream-poll",
    "stream_poll_seconds",
    type=click.FloatRange(0.05, 3600),
    default=1.0,
    show_default=True,
    help="Seconds after which an idle SSE stream re-reads the ledger anyway (a commit wakes "
    "it at once; this only bounds a lost wake-up).",
)
@drivers_after()
@click.option(
    "--ready-file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write this file (JSON: url, port, pid, token_file) once the daemon listens and its "
    "token exists; removed first if it exists, and again when the daemon stops.",
)
@click.option(
    "--database",
    help="The store's postgresql://… URL (default: agentkeep --database, else "
    "$AGENTKEEP_DATABASE); needed by --partitions.",
)
@click.option(
    "--partitions",
    type=click.IntRange(1, MAX_PARTITIONS),
    help="Serve as one worker of a PostgreSQL store divided into this many partitions: "
    "run the partitions the workers' coordinator gives this process, and answer any "
    "request (forwarding a write to its partition's owner). See docs/scale-out.md.",
)
@click.option(
    "--lease",
    "lease_seconds",
    type=click.FloatRange(0.3, 3600),
    default=10.0,
    show_default=True,
    help="With --partitions: how long this worker may go without heartbeating before the "
    "others take its partitions.",
)
@click.pass_context
@pass_state
def serve(
    state: CliState,
    ctx: click.Context,
    host: str,
    port: int,
    token_file: Path | None,
    no_auth: bool,
    allow_host: tuple[str, ...],
    allow_origin: tuple[str, ...],
    heartbeat_seconds: float,
    stream_poll_seconds: float,
    ready_file: Path | None,
    database: str | None,
    partitions: int | None,
    lease_seconds: float,
) -> None:
    """Serve the state directory over HTTP: the REST API of docs/daemon.md and SSE event streams.

    A token is generated on first start into daemon.token in the state directory (mode
    0600); send it as `Authorization: Bearer TOKEN`. SIGTERM or Ctrl-C stops it gracefully.
    """
    home = state.home
    if database:
        home = dataclasses.replace(home, database=database)
    if partitions is not None and not _is_postgres(home.database):
        raise CliError(
            "--partitions needs a PostgreSQL store: a SQLite store is served by one process.",
            code="partitions_need_postgres",
            hint="Give --database postgresql://…?schema=NAME (or set $AGENTKEEP_DATABASE), "
            "or drop --partitions.",
            exit_code=EXIT_BAD_INPUT,
        )
    drivers = home.drivers.load()  # a bad spec: exit 2 before anything is written
    parent = ctx.find_root()
    if parent.get_parameter_source("log_level") == click.core.ParameterSource.DEFAULT:
        configure_logging("info" if state.log_level != "debug" else "debug")
    if no_auth and not is_loopback(host):
        raise CliError(
            f"Refusing to listen on {host} without a token: a non-loopback address is "
            "reachable by others.",
            code="unsafe_bind",
            hint="Drop --no-auth (a token is generated), or bind 127.0.0.1.",
            exit_code=EXIT_BAD_INPUT,
        )
    try:
        token = None if no_auth else load_token(state.home.path, token_file=token_file)
    except DaemonConfigError as error:
        raise CliError(
            str(error),
            code=error.code,
            hint=f"Fix the token file, or set ${TOKEN_ENV}.",
            exit_code=EXIT_BAD_INPUT,
        ) from None
    options = ServeOptions(
        host=host,
        port=port,
        token=token,
        allowed_hosts=allow_host,
        allowed_origins=allow_origin,
        heartbeat_seconds=heartbeat_seconds,
        stream_poll_seconds=stream_poll_seconds,
    )

    if ready_file is not None:
        ready_file.unlink(missing_ok=True)  # a stale one must not pass for this daemon

    def listening(server: RunningServer) -> None:
        if ready_file is not None:
            ready = {"url": server.url, "port": server.port, "pid": os.getpid()}
            tokens = None if token is None else _token_path(state, token_file)
            write_ready_file(ready_file, {**ready, "token_file": tokens})
        # The console's one-time sign-in link (no link is needed without a token).
        console = server.url + "/" if token is None else server.signin_url()
        if state.json_mode:
            line = msgspec.json.encode(
                {"url": server.url, "port": server.port, "pid": os.getpid(), "console": console}
            ).decode()
        else:
            line = (
                f"agentkeep serving {state.home.path} at {server.url} (pid {os.getpid()})\n"
                f"console: {console} (a one-time link, valid for 5 minutes)"
            )
        click.echo(line)
        sys.stdout.flush()

    make_home_private(state.home.path)  # before the store creates its files
    if partitions is not None:
        assert home.database is not None
        try:
            _serve_worker(
                home, home.database, partitions, lease_seconds, drivers, options, listening
            )
        finally:
            if ready_file is not None:
                ready_file.unlink(missing_ok=True)
        return
    try:
        with open_system(state.home, resume=True, create=True, drivers=drivers) as (
            system,
            _config,
        ):
            try:
                run_daemon(system, options, on_listening=listening)
            except DaemonConfigError as error:
                raise CliError(
                    str(error), code=error.code, hint="Choose another --host/--port.", exit_code=1
                ) from None
    finally:
        if ready_file is not None:
            ready_file.unlink(missing_ok=True)


def _token_path(state: CliState, token_file: Path | None) -> str | None:
    """Where the token was read or written (None: it came from ``$AGENTKEEP_DAEMON_TOKEN``)."""
    if token_file is not None:
        return str(token_file)
    home_file = state.home.path / TOKEN_FILE
    return None if os.environ.get(TOKEN_ENV) or not home_file.is_file() else str(home_file)


def write_ready_file(path: Path, value: dict[str, object]) -> None:
    """Write ``value`` as JSON to ``path`` atomically, so a script that waits for ``path`` to
    exist never reads it half written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomically(path, value, mode=0o666)  # the caller's umask decides, as before


def _is_postgres(database: str | None) -> bool:
    return database is not None and is_postgres_url(database)


def _serve_worker(
    home: Home,
    database: str,
    count: int,
    lease_seconds: float,
    drivers: Sequence[Driver],
    options: ServeOptions,
    listening: Callable[[RunningServer], None],
) -> None:
    """Worker mode (``--partitions``): :func:`~agentkeep.server.worker_daemon.run_worker`."""
    from agentkeep.cluster import CoordinatorSettings
    from agentkeep.server.worker_daemon import run_worker

    lease_ms = int(lease_seconds * 1000)
    settings = CoordinatorSettings(count=count, lease_ms=lease_ms, tick_ms=min(250, lease_ms // 4))
    opener = partition_opener(home, drivers=drivers)
    try:
        run_worker(home.path, database, opener, options, settings, on_listening=listening)
    except DaemonConfigError as error:
        raise CliError(
            str(error), code=error.code, hint="Choose another --host/--port.", exit_code=1
        ) from None
    except StoreUnavailableError as error:
        raise CliError(str(error), code=error.code, exit_code=1) from None
