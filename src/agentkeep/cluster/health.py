"""What a worker reports of its part in the store: for the daemon's ``/healthz``."""

from __future__ import annotations

import msgspec

__all__ = ["CoordinatorHealth"]


class CoordinatorHealth(msgspec.Struct, frozen=True, kw_only=True):
    """What ``/healthz`` may show of a worker's part in the store."""

    #: Joined, connected, and heartbeat within the lease.
    healthy: bool
    token: str
    connected: bool
    #: Milliseconds since the last heartbeat the server accepted (None: none yet).
    heartbeat_age_ms: int | None
    lease_ms: int
    count: int
    share: int
    live_workers: int
    #: Partition index -> since when (ms since the epoch) this worker runs it.
    partitions: dict[int, int]
    opening: list[int]
    releasing: list[int]
