"""Partitions: a store on PostgreSQL divided into a fixed number of slices of its agents.

A **partition** is one of ``count`` slices of a store's agents (conversations); each is run
by one ``AgentSystem`` at a time (``AgentSystem.open(..., partition=Partition(i, n))``),
which writes only for its own partition's agents. An agent's partition follows from its id
alone (:func:`partition_of`), so any process can tell which partition a request belongs to
without reading the store; it is also stored on the agent's row (``agents.partition``) so
queries filter on it.

Invariants:

- :func:`partition_of` is stable across processes, machines, Python versions and releases:
  the first 8 bytes of the BLAKE2b digest (``digest_size=8``) of the id's UTF-8 bytes, read
  as a big-endian unsigned integer, modulo ``count``. It is not Python's ``hash`` (salted
  per process). Changing it would move agents between partitions: never change it.
- A partition's system creates agents only in its partition: an id it draws is drawn again
  until it hashes there (:func:`new_id_in`), and a child agent lands in its parent's
  partition (its id must hash there too).
- The classic store (no partition given) is partition 0 of 1: it owns every agent.

This module imports nothing of PostgreSQL: the system and the coordinator use it without psycopg.
"""

from __future__ import annotations

import hashlib
from typing import Final

import msgspec

from agentkeep.errors import InvalidConfigError, PartitionNotOwnedError
from agentkeep.types.ids import new_id

__all__ = ["CLASSIC", "MAX_PARTITIONS", "Partition", "new_id_in", "partition_of"]

#: The most partitions a store may have (each is one advisory lock and one owner row).
MAX_PARTITIONS: Final = 4096


def partition_of(agent_id: str, count: int) -> int:
    """The partition (``0 <= p < count``) of the agent ``agent_id`` in a store of ``count``
    partitions (see the module for the hash, which never changes).

    Raises:
        InvalidConfigError: ``count`` is not 1..:data:`MAX_PARTITIONS`.
    """
    _check_count(count)
    digest = hashlib.blake2b(agent_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


def _check_count(count: object) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_PARTITIONS:
        raise InvalidConfigError(
            f"a partition count must be an integer from 1 to {MAX_PARTITIONS}, got {count!r}"
        )
    return count


class Partition(msgspec.Struct, frozen=True):
    """Partition ``index`` of a store divided into ``count`` partitions.

    Raises:
        InvalidConfigError: ``count`` is not 1..:data:`MAX_PARTITIONS`, or ``index`` is not
            ``0 <= index < count``.
    """

    index: int
    count: int

    def __post_init__(self) -> None:
        count = _check_count(self.count)
        index = self.index
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
            raise InvalidConfigError(
                f"a partition index must be an integer from 0 to {count - 1}, got {index!r}"
            )

    def __str__(self) -> str:
        return f"partition {self.index} of {self.count}"

    def owns(self, agent_id: str) -> bool:
        """True if the agent ``agent_id`` belongs to this partition."""
        return partition_of(agent_id, self.count) == self.index

    def check(self, agent_id: str) -> None:
        """Refuse a write for an agent of another partition.

        Raises:
            PartitionNotOwnedError: ``agent_id`` belongs to another partition (naming it).
        """
        other = partition_of(agent_id, self.count)
        if other != self.index:
            raise PartitionNotOwnedError(agent_id, other, owned=self.index, count=self.count)

    def check_registry(self) -> None:
        """Refuse a registry (definitions) write unless this is partition 0.

        Raises:
            PartitionNotOwnedError: this system owns another partition.
        """
        if self.index != 0:
            raise PartitionNotOwnedError(None, 0, owned=self.index, count=self.count)


#: The classic store: one partition, owning every agent.
CLASSIC: Final = Partition(0, 1)


def new_id_in(partition: Partition) -> str:
    """A fresh id (:func:`agentkeep.types.new_id`) that belongs to ``partition``: ids are
    drawn until one hashes there (on average ``count`` draws)."""
    while True:
        agent_id = new_id()
        if partition.owns(agent_id):
            return agent_id
