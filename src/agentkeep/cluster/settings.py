"""The coordinator's settings: the partition count, the lease and how often it acts.

A worker is a member while it heartbeats: every ``heartbeat_ms`` (default a third of the
lease) it stamps its row with the server's clock. A member whose last heartbeat is older
than ``lease_ms`` is dead to the others even if its sessions still run (a stopped or hung
process): the first live worker to see it ends every session of its process and takes its
partitions. A member whose coordinator session the server no longer runs is dead at once.

So the lease bounds a takeover when the death is not visible to PostgreSQL (lease plus
one tick), and ``tick_ms`` bounds it when it is (one tick, plus the time to open the
partition). A shorter lease fails over faster and expels a worker sooner for a pause (a
long garbage collection, a slow disk, a saturated machine); keep it several times the
longest pause a healthy worker may have.
"""

from __future__ import annotations

import msgspec

__all__ = ["CoordinatorSettings"]


class CoordinatorSettings(msgspec.Struct, frozen=True, kw_only=True):
    """How a worker takes part (see the module). ``count`` is the store's partition count."""

    count: int
    lease_ms: int = 10_000
    #: Default: a third of the lease.
    heartbeat_ms: int | None = None
    tick_ms: int = 250
    #: How long ending a dead worker's session may wait for the server to end it.
    terminate_wait_ms: int = 5_000
    #: This worker's REST address, shown by ``agentkeep workers`` (None: it serves none).
    address: str | None = None

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"count: a store has at least one partition, not {self.count}")
        if self.tick_ms < 1 or self.lease_ms < 3 * self.tick_ms:
            raise ValueError(
                f"lease_ms ({self.lease_ms}) must be at least three ticks ({self.tick_ms} ms)"
            )
        if self.heartbeat_ms is not None and not 0 < self.heartbeat_ms < self.lease_ms:
            raise ValueError("heartbeat_ms must be positive and shorter than the lease")

    @property
    def heartbeat_every_ms(self) -> int:
        """How often the worker heartbeats: ``heartbeat_ms``, else a third of the lease."""
        return self.heartbeat_ms if self.heartbeat_ms is not None else self.lease_ms // 3
