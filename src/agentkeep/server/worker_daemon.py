"""``agentkeep serve --partitions N``: a worker serving part of a PostgreSQL store.

:func:`run_worker` binds the address first (so the REST address is known), builds the
:class:`~agentkeep.server.cluster_front.ClusterFront` behind the daemon's guard, starts the
:class:`~agentkeep.cluster.Coordinator` with that address and a
:class:`~agentkeep.server.partition_runner.SystemRunner` (each partition it is given is one
``AgentSystem`` with the daemon's app over it), then serves until SIGTERM or SIGINT.

Shutdown, in this order: leave the cluster gracefully (``Coordinator.stop()``: the row is
deleted so the others take over at once, each partition is taken off the front and its
system drained and closed while the HTTP server still forwards its requests to the next
owner), then stop accepting and end the remaining streams. ``daemon.json`` names the worker
while it listens, as the classic daemon's does, and the worker holds its home's lock file
for its whole life (:func:`~agentkeep.agent_system.surfaces.hold_home`): the CLI and
``agentkeep mcp`` on that home find the worker by it (and go through its REST API), and a
second process serving the same home is refused.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from agentkeep.agent_system import AgentSystem
from agentkeep.agent_system.surfaces import hold_home
from agentkeep.cluster import Coordinator, CoordinatorSettings
from agentkeep.logs import get_logger
from agentkeep.partitions import Partition
from agentkeep.server.cluster_front import ClusterFront
from agentkeep.server.console_auth import ConsoleSessions
from agentkeep.server.daemon import (
    RunningServer,
    ServeOptions,
    remove_daemon_file,
    write_daemon_file,
)
from agentkeep.server.limits import raise_descriptor_limit
from agentkeep.server.partition_runner import SystemRunner
from agentkeep.server.security import Guard

__all__ = ["WorkerServer", "run_worker"]

log = get_logger(__name__)


class WorkerServer(RunningServer):
    """The HTTP server of a worker: the front over the partitions' apps (see the module).

    Raises:
        DaemonConfigError: the address is refused or cannot be bound.
    """

    def __init__(self, database: str, count: int, options: ServeOptions) -> None:
        self.front = ClusterFront(database, count)
        super().__init__(None, options)

    def _make_app(self, system: AgentSystem | None) -> Any:
        self.console = ConsoleSessions(self.policy.token)
        return Guard(self.front, self.policy, self.console)

    def _close_streams(self) -> int:
        return self.front.close_streams()

    def signin_url(self) -> str:
        """A fresh one-time console sign-in link of this worker."""
        from agentkeep.server.routes_console import signin_path

        return self.url + signin_path(self.console)


def run_worker(
    home: Path,
    database: str,
    opener: Callable[[Partition], AgentSystem],
    options: ServeOptions,
    settings: CoordinatorSettings,
    *,
    on_listening: Callable[[RunningServer], None] = lambda server: None,
) -> None:
    """Serve as a worker until SIGTERM or SIGINT, then leave gracefully (module doc).

    Call from the main thread. ``settings.address`` is replaced by the bound address.

    Raises:
        StoreLockedError: another process serves ``home``.
        StoreUnavailableError: the coordinator could not join.
        DaemonConfigError: the address is refused or cannot be bound.
    """
    home_lock = hold_home(home)
    try:
        _serve(home, database, opener, options, settings, on_listening)
    finally:
        home_lock.release()


def _serve(
    home: Path,
    database: str,
    opener: Callable[[Partition], AgentSystem],
    options: ServeOptions,
    settings: CoordinatorSettings,
    on_listening: Callable[[RunningServer], None],
) -> None:
    stop = threading.Event()

    def handle(signum: int, frame: FrameType | None) -> None:
        log.info("shutdown_signal", signal=signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}
    raise_descriptor_limit()
    server = WorkerServer(database, settings.count, options)
    front = server.front
    runner = SystemRunner(opener, front, server.app_over)
    address = CoordinatorSettings(
        count=settings.count,
        lease_ms=settings.lease_ms,
        heartbeat_ms=settings.heartbeat_ms,
        tick_ms=settings.tick_ms,
        terminate_wait_ms=settings.terminate_wait_ms,
        address=server.url,
    )
    coordinator: Coordinator | None = None
    try:
        coordinator = Coordinator(database, runner, address)
        front.coordinator = coordinator
        server.start()
        coordinator.start()
        write_daemon_file(home, server.url)
        on_listening(server)
        while not stop.wait(0.2):
            if not server.alive:
                break
        started = time.monotonic()
        coordinator.stop()
        log.info("worker_left", seconds=round(time.monotonic() - started, 3))
        server.stop()
    finally:
        remove_daemon_file(home)
        if coordinator is not None:
            coordinator.stop()
        if server.alive:
            server.stop()
        front.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
