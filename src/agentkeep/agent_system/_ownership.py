"""What a system may write: all of its store, or one partition of it (``agentkeep.partitions``).

:class:`Ownership` is asked before every write a system makes for an agent — accepting a
message (every surface's send, steer and turn goes through the one acceptance path), abort,
compact, wake, an explicit start, create, delete, metadata and base-state updates, purging
archived history, a session's start, archive, settle and cancel, a transaction's
``agent_kv`` — and before every registry write. A system that owns one partition refuses a
write for another partition's agent (and, unless it is partition 0, a registry write) with
:class:`~agentkeep.errors.PartitionNotOwnedError` before anything is written; an actor is
never made for such an agent. A classic system (no partition) owns everything and checks
nothing. Reads are never refused.
"""

from __future__ import annotations

from agentkeep.partitions import Partition, new_id_in, partition_of
from agentkeep.types import new_id

__all__ = ["Ownership"]


class Ownership:
    """The partition a system owns (None: the whole store), and the store's partition count
    (``agents.partition`` of a new agent is its id's partition under that count)."""

    def __init__(self, partition: Partition | None, count: int = 1) -> None:
        self.partition = partition
        self.count = count if partition is None else partition.count

    @property
    def index(self) -> int | None:
        """The owned partition's index (None: the whole store)."""
        return None if self.partition is None else self.partition.index

    def check(self, agent_id: str) -> None:
        """Raises ``PartitionNotOwnedError`` if ``agent_id`` is another partition's."""
        if self.partition is not None:
            self.partition.check(agent_id)

    def check_registry(self) -> None:
        """Raises ``PartitionNotOwnedError`` unless this system may write the registry."""
        if self.partition is not None:
            self.partition.check_registry()

    def new_id(self) -> str:
        """A fresh agent id in the owned partition."""
        return new_id() if self.partition is None else new_id_in(self.partition)

    def partition_of(self, agent_id: str) -> int:
        """The value of ``agents.partition`` for a new agent ``agent_id``."""
        return 0 if self.count == 1 else partition_of(agent_id, self.count)
