"""Measure the chaos suites' store operations: healthy-run length per process (phase) and the
hit rate of their seeded fault points (the fraction of faulted processes whose fault fired).

Run from a worktree: ``PYTHONPATH=$PWD/src python bench/chaos_calibration.py --seeds 30``.
Works on any revision (it hooks ``FaultInjector`` and ``ChaosWorld.run_process`` from the
outside), so the numbers of two revisions compare directly.
"""

from __future__ import annotations

import argparse
import logging
import statistics
from typing import Any

import structlog

from agentkeep.chaos import campaigns
from agentkeep.chaos.world import ChaosWorld
from agentkeep.persistence import faults as faults_module

STORE_FAULT_SUITES = (
    "crash_recovery",
    "queues",
    "interruption",
    "flaky_store",
    "writer_failures",
    "compaction",
    "compaction_under_load",
    "model_switch",
    "retry_forever",
    "permission_modes",
)

_injectors: list[Any] = []
_records: list[tuple[Any, int]] = []  # (plan, operations of the process)
_healthy = False
_original_init = faults_module.FaultInjector.__init__
_original_run = ChaosWorld.run_process


def _init(self: Any, plan: Any) -> None:
    _original_init(self, plan)
    _injectors.append(self)


def _run(self: ChaosWorld, **options: Any) -> Any:
    plan = options.get("faults")
    if _healthy:
        options["faults"] = None
    before = len(_injectors)
    report = _original_run(self, **options)
    mine = _injectors[before:]
    operations = mine[0].operations if mine else 0
    _records.append((plan, operations))
    return report


faults_module.FaultInjector.__init__ = _init  # type: ignore[method-assign]
ChaosWorld.run_process = _run  # type: ignore[method-assign]


def measure(suite: str, seeds: range, healthy: bool) -> list[list[tuple[Any, int]]]:
    global _healthy
    _healthy = healthy
    runs = []
    for seed in seeds:
        _records.clear()
        campaigns.SUITES[suite](seed)
        runs.append(list(_records))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--suite", action="append")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    for suite in args.suite or STORE_FAULT_SUITES:
        seeds = range(args.seeds)
        healthy = measure(suite, seeds, healthy=True)
        # The longest process that would have carried a fault plan, per seed.
        longest = [
            max((ops for plan, ops in run if plan is not None), default=0) for run in healthy
        ]
        faulted = measure(suite, seeds, healthy=False)
        plans = [(plan, ops) for run in faulted for plan, ops in run if plan is not None]
        fired = [ops >= plan.at for plan, ops in plans]
        first = [next((ops >= p.at for p, ops in run if p is not None), False) for run in faulted]
        ats = [plan.at for plan, _ in plans]
        median = statistics.median(longest)
        top = max(ats) if ats else 0
        print(
            f"{suite:22s} longest faulted process (healthy): median {median:5.0f} "
            f"[{min(longest)}-{max(longest)}]  fault points {len(plans):3d} at <= {top:4d} "
            f"(reach {top / max(1, median):.2f} of median)  "
            f"hit rate {sum(fired) / max(1, len(fired)):.2f}"
            f"  first fault fired in {sum(first)}/{len(first)} seeds",
            flush=True,
        )


if __name__ == "__main__":
    main()
