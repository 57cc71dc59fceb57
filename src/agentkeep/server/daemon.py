"""Running the app: uvicorn in a thread over an embedded system, and the daemon around it.

:class:`RunningServer` is the embedding API: it binds the socket itself (so ``port=0`` is
known before anything is served), runs ``uvicorn.Server`` in its own thread and event loop,
and stops in a bounded time. :func:`run_daemon` is ``agentkeep serve``: it writes
``<home>/daemon.json`` once listening and, on SIGTERM/SIGINT, shuts down in this order —

1. stop accepting (uvicorn closes its listening socket) and remove ``daemon.json``;
2. end every open SSE stream (uvicorn would otherwise wait for them forever);
3. ``AgentSystem.shutdown()``: in-flight steps finish and commit, owed work resumes at the
   next start.

The invariant of the ordering: no request can reach the system after it began shutting down
except as a refusal (503), and no stream outlives the server.

Private by default, whatever the token's source: the daemon makes its home 0700 and every
file in it 0600 (:func:`make_home_private`), and creates later files (the WAL, ``daemon.json``)
under a 0077 umask, so another local user reads no conversation and cannot rewrite
``daemon.json`` to capture the CLI's token.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn
from starlette.applications import Starlette

from agentkeep.agent_system import AgentSystem
from agentkeep.logs import get_logger
from agentkeep.server.app import create_app
from agentkeep.server.context import ServerContext
from agentkeep.server.limits import (
    ConnectionLimits,
    LogBudget,
    connection_bound,
    protocol_class,
    raise_descriptor_limit,
)
from agentkeep.server.security import DaemonConfigError, SecurityPolicy

log = get_logger(__name__)

#: The default address.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 4317
#: The file naming a running daemon, in the state directory.
DAEMON_FILE = "daemon.json"


@dataclass(frozen=True, kw_only=True)
class ServeOptions:
    """How to serve.

    Attributes:
        host: The address to bind (loopback by default).
        port: The port; 0 picks a free one.
        token: The token every ``/v1`` request must carry; None serves without one (refused
            on a non-loopback address).
        allowed_hosts: ``Host`` values accepted besides the bound address's.
        allowed_origins: ``Origin`` values accepted besides the bound address's.
        heartbeat_seconds: Seconds between SSE heartbeat comments.
        wait_seconds: The longest a waiting request waits.
        graceful_seconds: How long uvicorn waits for open requests at shutdown before
            cancelling them.
        limits: Header and body deadlines, and the connection bound (capped at half the
            soft descriptor limit); see :mod:`agentkeep.server.limits`.
        stream_buffer_bytes: The most bytes of events an SSE stream holds for its client.
        stream_stall_seconds: How long a stream's buffer may stay full before the stream
            ends with a ``resume`` event (its client reconnects from its last id).
        stream_send_timeout_seconds: How long one write to an SSE client may wait before its
            connection is dropped (a client that stopped reading).
        stream_poll_seconds: How often an SSE stream re-reads the ledger when nothing woke
            it (``agentkeep serve --stream-poll``).
    """

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    token: str | None = None
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    heartbeat_seconds: float = 15.0
    wait_seconds: float = 120.0
    graceful_seconds: int = 3
    limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    stream_buffer_bytes: int = 256 * 1024
    stream_stall_seconds: float = 30.0
    stream_send_timeout_seconds: float = 120.0
    stream_poll_seconds: float = 1.0


def _bind(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as error:
        raise DaemonConfigError(f"Cannot use the address {host}:{port}: {error}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as error:
        sock.close()
        raise DaemonConfigError(f"Cannot listen on {host}:{port}: {error}") from None
    return sock


class RunningServer:
    """The REST + SSE app over ``system``, served by uvicorn in a thread.

    The server never closes ``system``: whoever opened it does, after :meth:`stop`.

    Raises:
        DaemonConfigError: the address is refused (non-loopback without a token) or cannot
            be bound.
    """

    def __init__(self, system: AgentSystem | None, options: ServeOptions) -> None:
        self._sock = _bind(options.host, options.port)
        try:
            self.host = options.host
            self.port: int = self._sock.getsockname()[1]
            policy = SecurityPolicy.for_bind(
                options.host,
                self.port,
                token=options.token,
                extra_hosts=options.allowed_hosts,
                extra_origins=options.allowed_origins,
            )
        except BaseException:
            self._sock.close()
            raise
        self.log_budget = LogBudget()
        self.policy = policy
        self.options = options
        self.app: Any = self._make_app(system)
        limits = options.limits
        self.limits = ConnectionLimits(
            header_timeout_seconds=limits.header_timeout_seconds,
            body_timeout_seconds=limits.body_timeout_seconds,
            max_connections=connection_bound(limits.max_connections),
        )
        config = uvicorn.Config(
            self.app,
            log_config=None,
            access_log=False,  # the app logs each request itself, structured
            lifespan="off",
            ws="none",
            http=protocol_class(self.limits, self.log_budget),
            proxy_headers=False,
            server_header=False,
            timeout_graceful_shutdown=options.graceful_seconds,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._run, name="agentkeep-http", daemon=True)
        self.error: BaseException | None = None

    def _make_app(self, system: AgentSystem | None) -> Any:
        """The ASGI app served (a subclass serving something else overrides it)."""
        assert system is not None
        return self.app_over(system)

    def app_over(self, system: AgentSystem) -> Starlette:
        """The daemon's app over ``system`` with this server's policy and options."""
        options = self.options
        app = create_app(
            system,
            self.policy,
            heartbeat_seconds=options.heartbeat_seconds,
            wait_seconds=options.wait_seconds,
            log_budget=self.log_budget,
            console=getattr(self, "console", None),
        )
        ctx: ServerContext = app.state.agentkeep
        ctx.stream_buffer_bytes = options.stream_buffer_bytes
        ctx.stream_stall_seconds = options.stream_stall_seconds
        ctx.stream_send_timeout_seconds = options.stream_send_timeout_seconds
        ctx.stream_poll_seconds = options.stream_poll_seconds
        return app

    def _close_streams(self) -> int:
        """End every open SSE stream (at stop)."""
        return self.context.streams.close_all()

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:4317``."""
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{shown}:{self.port}"

    def signin_url(self) -> str:
        """A fresh one-time console sign-in link (single use, short expiry:
        :mod:`agentkeep.server.console_auth`)."""
        from agentkeep.server.routes_console import signin_path

        return self.url + signin_path(self.app.state.console)

    @property
    def context(self) -> ServerContext:
        """The app's shared state (its open streams)."""
        found: ServerContext = self.app.state.agentkeep
        return found

    @property
    def alive(self) -> bool:
        """True while the server thread runs."""
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            self._server.run(sockets=[self._sock])
        except BaseException as error:  # surfaced by start() and the daemon loop
            self.error = error
            log.error("http_server_failed", error=repr(error))

    def start(self, timeout_seconds: float = 10.0) -> RunningServer:
        """Start serving; returns once the socket accepts connections.

        Raises:
            RuntimeError: the server failed to start in time.
        """
        self._thread.start()
        deadline = time.monotonic() + timeout_seconds
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self._server.should_exit = True
                raise RuntimeError(f"the HTTP server did not start: {self.error!r}")
            time.sleep(0.01)
        return self

    def stop(self, timeout_seconds: float = 5.0) -> bool:
        """Stop accepting, end every SSE stream, wait for the server thread (bounded).

        Returns:
            True if the server stopped within the timeout (it is forced after that).
        """
        self._server.should_exit = True
        streams = self._close_streams()
        self._thread.join(timeout_seconds)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(1.0)
        log.info("http_server_stopped", streams_ended=streams, clean=not self.alive)
        with contextlib.suppress(OSError):
            self._sock.close()
        return not self.alive


def make_home_private(home: Path) -> None:
    """The home 0700 (created if missing), nothing under it open to group or others (the
    store's files 0600), new files 0600 (umask 0077).

    Only what this user owns is changed; symbolic links are neither changed nor followed. The
    umask is the process's: call it from the daemon's process.
    """
    os.umask(0o077)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(home, 0o700)
    uid = os.geteuid()
    for directory, subdirectories, files in os.walk(home):
        for name in [*subdirectories, *files]:
            path = os.path.join(directory, name)
            with contextlib.suppress(OSError):
                found = os.lstat(path)
                if found.st_uid == uid and not stat.S_ISLNK(found.st_mode):
                    # Group and others lose every bit; the owner's stay (a script the user
                    # keeps there stays executable). agentkeep's own files are 0600.
                    os.chmod(path, stat.S_IMODE(found.st_mode) & 0o700)


def write_json_atomically(path: Path, value: object, *, mode: int = 0o600) -> None:
    """Write ``value`` as one line of JSON to ``path`` through a sibling file renamed over it,
    so a reader (a client, a script waiting for the file) never sees it half written. ``mode``
    is the new file's (before the umask)."""
    staged = path.with_name(f".{path.name}.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        staged.unlink()
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(json.dumps(value) + "\n")
    os.replace(staged, path)


def write_daemon_file(home: Path, url: str) -> Path:
    """``<home>/daemon.json`` (pid, url), mode 0600, written atomically."""
    path = home / DAEMON_FILE
    write_json_atomically(path, {"pid": os.getpid(), "url": url})
    return path


def remove_daemon_file(home: Path) -> None:
    """Remove ``daemon.json`` if it is this process's."""
    path = home / DAEMON_FILE
    with contextlib.suppress(OSError, ValueError):
        if json.loads(path.read_text(encoding="utf-8")).get("pid") == os.getpid():
            path.unlink()


def run_daemon(
    system: AgentSystem,
    options: ServeOptions,
    *,
    on_listening: Callable[[RunningServer], None] = lambda server: None,
) -> None:
    """Serve ``system`` until SIGTERM or SIGINT, then shut everything down (module doc).

    Call from the main thread. ``system`` is shut down before this returns.
    """
    stop = threading.Event()

    def handle(signum: int, frame: FrameType | None) -> None:
        log.info("shutdown_signal", signal=signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}
    raise_descriptor_limit()  # the connection bound is half of it (agentkeep.server.limits)
    try:
        make_home_private(system.home)
        server = RunningServer(system, options).start()
        try:
            write_daemon_file(system.home, server.url)
            on_listening(server)
            while not stop.wait(0.2):
                if not server.alive:
                    break
            started = time.monotonic()
            server.stop()
            remove_daemon_file(system.home)
            log.info("daemon_http_stopped", seconds=round(time.monotonic() - started, 3))
        finally:
            remove_daemon_file(system.home)
    finally:
        system.shutdown()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
