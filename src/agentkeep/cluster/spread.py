"""The even spread of a store's partitions over its live workers: pure arithmetic.

Every worker computes the same answer from the same membership: the live workers in a
fixed order (oldest first, then by token), and ``count`` partitions dealt out evenly —
each worker gets ``count // n``, and the first ``count % n`` of that order one more. The
shares always add up to ``count``, so when every worker holds exactly its share, every
partition is held, and a worker holding more than its share gives the extra ones up for
the workers holding fewer.

:func:`preferred_order` is the order in which a worker tries free partitions: starting at
its own slice of the range, so two workers opening at once rarely race for the same one
(the lock decides when they do).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import msgspec

__all__ = ["Plan", "fair_share", "plan", "preferred_order", "shares"]


def shares(count: int, workers: Sequence[str]) -> dict[str, int]:
    """Each worker's share of ``count`` partitions, ``workers`` in the agreed order."""
    if count < 1:
        raise ValueError(f"a store has at least one partition, not {count}")
    if not workers:
        return {}
    base, extra = divmod(count, len(workers))
    return {worker: base + (1 if rank < extra else 0) for rank, worker in enumerate(workers)}


def fair_share(count: int, workers: Sequence[str], me: str) -> int:
    """``me``'s share (0 when ``me`` is not among ``workers``: not a live member)."""
    return shares(count, workers).get(me, 0)


def preferred_order(count: int, workers: Sequence[str], me: str) -> list[int]:
    """All partitions, starting at ``me``'s slice of ``range(count)`` and wrapping around."""
    if me not in workers:
        return list(range(count))
    start = (workers.index(me) * count) // len(workers)
    return [(start + offset) % count for offset in range(count)]


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    """What one tick does: the partitions to give up and those to open."""

    share: int
    release: list[int]
    open: list[int]


def plan(
    count: int,
    workers: Sequence[str],
    me: str,
    *,
    held: Collection[int],
    opening: Collection[int],
    releasing: Collection[int],
    locked: Collection[int],
) -> Plan:
    """``me``'s next step towards its share. Holding more (``held`` plus ``opening``), it
    gives up held ones, highest first; holding fewer, it opens partitions that no session
    holds (``locked``) and that it is not already opening or releasing, in its
    :func:`preferred_order`."""
    share = fair_share(count, workers, me)
    mine = set(held) | set(opening)
    if len(mine) > share:
        return Plan(share=share, release=sorted(held, reverse=True)[: len(mine) - share], open=[])
    busy = mine | set(releasing) | set(locked)
    free = [p for p in preferred_order(count, workers, me) if p not in busy]
    return Plan(share=share, release=[], open=free[: share - len(mine)])
