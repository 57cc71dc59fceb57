"""The coordinator's runner in a worker: a partition is one AgentSystem and its app.

:class:`SystemRunner` implements :class:`~agentkeep.cluster.PartitionRunner` over real
systems: ``open(index, count)`` opens ``AgentSystem.open(home, database=url,
partition=Partition(index, count))`` through the worker's opener (the same providers, tools
and drivers ``agentkeep serve`` uses; it restores the partition's agents that owe work, and
raises :class:`~agentkeep.errors.StoreLockedError` when another worker holds the partition),
builds the daemon's app over it and adds it to the worker's
:class:`~agentkeep.server.cluster_front.ClusterFront`. The handle's ``lost`` is the system's
own :attr:`~agentkeep.AgentSystem.lost`; ``shutdown()`` takes the partition off the front
first (its requests go to the next owner from then on, its streams end), then
``system.shutdown()`` (the graceful hand-off: its agents drained) and ``close()``, which
releases the partition's lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from starlette.applications import Starlette

from agentkeep.agent_system import AgentSystem
from agentkeep.logs import get_logger
from agentkeep.partitions import Partition
from agentkeep.server.cluster_front import ClusterFront
from agentkeep.server.context import ServerContext

__all__ = ["SystemHandle", "SystemRunner"]

log = get_logger(__name__)


class SystemHandle:
    """One partition's system running in this worker (see the module)."""

    def __init__(self, index: int, system: AgentSystem, front: ClusterFront) -> None:
        self.index = index
        self.system = system
        self._front = front
        self._lock = threading.Lock()
        self._shut = False

    @property
    def lost(self) -> str | None:
        """None while the system runs its partition; why, once it cannot."""
        return self.system.lost

    def shutdown(self) -> None:
        """Off the front, drained, closed (the lock released). Idempotent."""
        with self._lock:
            if self._shut:
                return
            self._shut = True
        self._front.remove(self.index)
        try:
            self.system.shutdown()
        finally:
            self.system.close()


class SystemRunner:
    """Opens partitions' systems for the coordinator (see the module).

    Args:
        opener: Opens the system of one partition (raises ``StoreLockedError`` when held).
        front: Where each opened partition's app is served.
        make_app: The daemon's app over one system (``create_app`` with the worker's policy).
    """

    def __init__(
        self,
        opener: Callable[[Partition], AgentSystem],
        front: ClusterFront,
        make_app: Callable[[AgentSystem], Starlette],
    ) -> None:
        self._opener = opener
        self._front = front
        self._make_app = make_app

    def open(self, index: int, count: int) -> SystemHandle:
        """Run partition ``index`` of ``count`` here (see the module)."""
        system = self._opener(Partition(index, count))
        try:
            app = self._make_app(system)
            context: ServerContext = app.state.agentkeep
        except BaseException:
            system.shutdown()
            system.close()
            raise
        self._front.add(index, app, context.streams.close_all, lost=lambda: system.lost)
        log.info("worker_partition_serving", partition=index, count=count)
        return SystemHandle(index, system, self._front)
