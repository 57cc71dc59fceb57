"""Where the in-process suites draw their store fault points: over a measured healthy run.

A suite's fault point (``crash``, ``flaky`` or ``writer`` at store operation N) only tests
something if the process is still working at operation N. The store keeps getting cheaper
per step, so a hard-coded bound (such as "N ≤ 150 of about 210") silently drifts: too low,
the fault never reaches the end of the work; too high, most faults land after the work is
done and the seed exercises a healthy process.

So each suite draws N from ``1..reach(suite)``, where ``reach`` is :data:`REACH` times
:data:`HEALTHY_OPERATIONS` — the measured length, in store operations, of the longest
process the suite faults when it runs healthy (its whole workload for the suites that offer
everything up front, one batch for the suites that offer per process). The constant keeps
a seed's plan the same on every run (a plan that depended on a live measurement would
change with thread timing, and ``CHAOS_SEED`` could no longer replay it);
``tests/chaos/test_calibration.py`` measures the healthy length again and fails when it
drifted by more than :data:`DRIFT` from the constant, naming the value to write here.
``bench/chaos_calibration.py`` prints the lengths and hit rates of every suite.
"""

from __future__ import annotations

import contextvars
import random
import statistics
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentkeep.chaos.campaign_result import CampaignResult

# Store operations of the longest faulted process of a healthy run (fault plans dropped),
# median over seeds 0-19 (the calibration test checks seeds 0-4), measured after the lone
# work item lost its SAVEPOINT/RELEASE (2026-12-01). 499a260, before the writer memo and the
# multi-row ledger insert, ran up to 65% more (crash_recovery 540, queues 318);
# bench/chaos_calibration.py measures any revision. interruption's length varies most by seed:
# since each of its processes brings a message of its own (an abort no longer
# leaves the queue to the next process), its 20-seed median is 148 and seeds 0-4 measure
# 113; it is set between the two.
HEALTHY_OPERATIONS: dict[str, int] = {
    "crash_recovery": 324,
    "queues": 200,
    "interruption": 125,
    "flaky_store": 127,
    "writer_failures": 107,
    "compaction": 35,
    "compaction_under_load": 203,
    "model_switch": 117,
    "permission_modes": 216,
    # permission_modes' workload under a flaky provider, whose retries make its healthy
    # length swing from 100 to 600 operations with thread timing (median 142-268 by sample):
    # too noisy to check against a constant, so only permission_modes' length is checked.
    "retry_forever": 175,
    "extensions": 684,
}
NOISY = frozenset({"retry_forever"})
# Fault points reach to the median healthy length: a typical process's end is reachable,
# and processes with less work (no new message, a shorter seed) sometimes finish before
# their fault (a healthy process among faulted ones is a case worth playing too).
REACH = 1.0
# Suites whose processes share one workload offered up front (crash_recovery, interruption,
# model_switch) draw the first faulted process's point over the whole run, and each later
# one's over its first LATER: a restart resumes what is left, which a point drawn over the
# whole run would mostly miss (the process finishes first), while an early point crashes it
# during recovery, where most of the work a restart redoes happens.
LATER = 1 / 3
# How far the measured healthy length may drift from HEALTHY_OPERATIONS before the
# calibration test fails.
DRIFT = 0.3
CALIBRATION_SEEDS = range(5)

_fault_free: contextvars.ContextVar[bool] = contextvars.ContextVar("fault_free", default=False)


def reach(suite: str) -> int:
    """The highest store operation ``suite`` draws a fault point from."""
    return max(1, round(HEALTHY_OPERATIONS[suite] * REACH))


def fault_point(rng: random.Random, suite: str, high: int | None = None) -> int:
    """A fault point for one process of ``suite``: uniform over ``1..high`` (default
    ``reach(suite)``), one draw of ``rng`` as the hard-coded bounds were, so the rest of a
    seed's plan is the same."""
    return rng.randint(1, high if high is not None else reach(suite))


def later_reach(suite: str) -> int:
    """The highest store operation a later process of a shared-workload suite draws from (see
    :data:`LATER`)."""
    return max(1, round(HEALTHY_OPERATIONS[suite] * LATER))


def fault_free() -> bool:
    """True inside :func:`healthy`: campaigns draw their plans but drop them."""
    return _fault_free.get()


@contextmanager
def healthy() -> Iterator[None]:
    """Campaigns run inside play the same processes, but with every fault plan dropped
    (the processes that would have carried one are still listed in
    :attr:`CampaignResult.faulted`)."""
    token = _fault_free.set(True)
    try:
        yield
    finally:
        _fault_free.reset(token)


def longest_faulted_process(result: CampaignResult) -> int:
    """Store operations of the longest process that carried (or, run :func:`healthy`, would
    have carried) a fault plan; 0 without any."""
    return max((r.operations for r in result.reports if r.generation in result.faulted), default=0)


def healthy_operations(campaign: Callable[[int], CampaignResult], seeds: Iterable[int]) -> int:
    """The median over ``seeds`` of :func:`longest_faulted_process` of a healthy run."""
    with healthy():
        lengths = [longest_faulted_process(campaign(seed)) for seed in seeds]
    return round(statistics.median(lengths))


def hits(result: CampaignResult) -> list[bool]:
    """For each process that carried a fault plan: whether its fault fired."""
    return [r.fault_fired for r in result.reports if r.faults is not None]


__all__ = [
    "CALIBRATION_SEEDS",
    "DRIFT",
    "HEALTHY_OPERATIONS",
    "LATER",
    "NOISY",
    "REACH",
    "fault_free",
    "fault_point",
    "healthy",
    "healthy_operations",
    "hits",
    "later_reach",
    "longest_faulted_process",
    "reach",
]
