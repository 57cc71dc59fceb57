"""What the coordinator asks of whatever runs a partition: open it, shut it, report its loss.

The coordinator never holds a partition's lock itself. A :class:`PartitionRunner` opens the
system that runs one partition (``AgentSystem.open(home, database=url,
partition=Partition(index, count))``), and that system holds the partition's advisory lock
on its own writer session for as long as it runs. The coordinator only decides which
partitions this worker should run and calls these three things:

- ``runner.open(index, count)`` returns a :class:`PartitionHandle` once the partition is
  running here. It raises :class:`~agentkeep.errors.StoreLockedError` when another session
  holds the partition (the coordinator tries again at a later tick, or another worker keeps
  it); any other exception is logged and retried at a later tick.
- ``handle.shutdown()`` gives the partition up gracefully (its agents drained, its lock
  released when it returns), so the next owner can open it. Called once, from a thread of
  the coordinator's; it may block for as long as the drain takes.
- ``handle.lost`` is None while the partition is held here, and says why once the runner
  knows it is not (its session was terminated and another owner took it:
  ``StoreOwnershipLostError``). The coordinator reads it at every tick (keep it cheap: a
  flag the system sets, not a round trip to the server); a runner that
  learns of a loss may call :meth:`Coordinator.wake` to have it noticed at once. A lost
  handle is still shut down (to release what it holds) before it is forgotten.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["PartitionHandle", "PartitionRunner"]


@runtime_checkable
class PartitionHandle(Protocol):
    """One partition running in this worker (see the module)."""

    @property
    def lost(self) -> str | None:
        """None while held; why, once the partition was lost."""
        ...

    def shutdown(self) -> None:
        """Give the partition up: drain, then release its lock. Idempotent."""
        ...


@runtime_checkable
class PartitionRunner(Protocol):
    """Opens the system that runs one partition of the store (see the module)."""

    def open(self, index: int, count: int) -> PartitionHandle:
        """Run partition ``index`` of ``count`` here.

        Raises:
            StoreLockedError: another session holds the partition.
        """
        ...
