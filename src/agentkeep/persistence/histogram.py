"""A histogram the store writer fills without a lock of its own: counts per bucket, a sum.

The writer observes each committed group (its size, its latency) in the thread that owns the
writer's counters, under the lock they already take (:class:`~agentkeep.persistence.inbox.
Counters`); a reader takes a :class:`HistogramSnapshot` under the same lock. No dependency:
the daemon's metrics endpoint turns a snapshot into a Prometheus histogram at scrape time.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

import msgspec

#: Upper bounds (seconds) of a group's commit latency: an fsync is 0.1–10 ms on a disk.
COMMIT_SECONDS_BOUNDS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
#: Upper bounds of a group's size (work items in one transaction).
GROUP_SIZE_BOUNDS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0)


class HistogramSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """A histogram at one moment, in Prometheus' terms.

    Attributes:
        bounds: The buckets' upper bounds, ascending (``le``; ``+Inf`` is implied).
        cumulative: For each bound, then ``+Inf``: the observations at most that bound.
        total: The sum of every observation.
    """

    bounds: tuple[float, ...]
    cumulative: tuple[int, ...]
    total: float

    @property
    def count(self) -> int:
        """How many observations there were (the ``+Inf`` bucket)."""
        return self.cumulative[-1]


class BucketCounts:
    """Counts per bucket and a sum; not thread-safe by itself (its owner's lock guards it).

    Invariant: ``counts[i]`` is how many observations fell in ``(bounds[i-1], bounds[i]]``,
    the last one counting those above every bound.
    """

    __slots__ = ("_bounds", "_counts", "_total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self._bounds = tuple(sorted(bounds))
        self._counts = [0] * (len(self._bounds) + 1)
        self._total = 0.0

    def observe(self, value: float) -> None:
        """Count ``value`` in the first bucket whose bound is at least it."""
        self._counts[bisect_left(self._bounds, value)] += 1
        self._total += value

    def snapshot(self) -> HistogramSnapshot:
        """The cumulative counts now."""
        cumulative: list[int] = []
        running = 0
        for count in self._counts:
            running += count
            cumulative.append(running)
        return HistogramSnapshot(
            bounds=self._bounds, cumulative=tuple(cumulative), total=self._total
        )
