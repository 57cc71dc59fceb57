"""The ledger evidence sweep: the ledger and turn checks of the real-process, lifecycle and
power-loss campaigns, and the mutants each must catch.

``python -m agentkeep.chaos.ledger_sweep [--campaign C ...] [--seeds N] [--start S]
[--jobs J] [--mutant M | --mutants]``

- plain: run ``--seeds`` seeds (default ``CHAOS_SEEDS``, else each campaign's CI count) of
  each campaign; print every failing seed, then a table of seeds, failures and findings per
  check (``L1``–``L4``, ``T1``–``T5``, base-spec numbers, ``other``: e.g. an integrity check);
- ``--mutant M``: the same under one mutant of
  :data:`~agentkeep.chaos._mutants.runtime.LEDGER_MUTANTS` (or ``lying_sync`` for
  ``power_loss``); the seeds catching it are the ones that fail;
- ``--mutants``: for every mutant of :data:`EXPECTED` and each campaign it is expected in,
  the first seed (from ``--start``, within ``--seeds``) whose findings name the expected
  check. Exits 1 if any mutant escapes.

Campaigns: ``process_kills`` (SIGKILLed worker processes; :mod:`~agentkeep.chaos.process_kills`),
``lifecycle_races`` (:mod:`~agentkeep.chaos.lifecycle`) and ``power_loss``
(:mod:`~agentkeep.chaos.power`).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import re
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from agentkeep.chaos.campaigns import seeds_from_env
from agentkeep.chaos.power import LYING_SYNC
from agentkeep.chaos.process_worker import RERUN_FRAGILE

if TYPE_CHECKING:
    from agentkeep.chaos._mutants.runtime import Mutant

CAMPAIGNS = ("process_kills", "lifecycle_races", "power_loss")
# The CI seed count of each campaign (its test's default).
CI_SEEDS = {"process_kills": 6, "lifecycle_races": 15, "power_loss": 6}
# Each mutant, the check that must name it, and the campaigns expected to catch it
# (docs/chaos.md lists the first catching seed of each; tests/chaos/test_ledger_evidence.py
# replays a catch within the CI seeds, or a targeted kill where a seed rarely lands).
EXPECTED: dict[str, tuple[str, tuple[str, ...]]] = {
    "sequence_gap_at_each_batch": ("L1", ("process_kills",)),
    "sequence_gap_at_each_acceptance": ("L1", CAMPAIGNS),
    "settled_event_skipped": ("L2", ("process_kills", "lifecycle_races")),
    "accepted_event_in_second_transaction": ("L2", ("process_kills", "power_loss")),
    "ledger_kept_across_recreate": ("L2", ("lifecycle_races",)),
    "first_event_retimed_on_acceptance": ("L3", ("process_kills", "lifecycle_races")),
    "lying_sync": ("L3", ("power_loss",)),
    "subscription_resumes_one_late": ("L4", ("process_kills", "lifecycle_races")),
    "subscription_resumes_one_early": ("L4", ("process_kills", "lifecycle_races")),
    "terminal_turn_event_appended_twice": ("T1", ("process_kills", "lifecycle_races")),
    "completion_overwrites_earlier_results": ("T2", ("process_kills", "lifecycle_races")),
    "input_event_without_turn_id": ("T3", CAMPAIGNS),
    "retried_key_opens_second_turn": ("T4", ("process_kills",)),
    "answer_is_the_continuation_alone": ("T5", ("process_kills",)),
}
# The mutants each campaign can install: the ledger ones, and its own.
_OWN_MUTANTS = {
    "process_kills": {RERUN_FRAGILE},
    "power_loss": {LYING_SYNC},
    "lifecycle_races": set(),
}
_CHECK = re.compile(r"^(?:§7\.(\d+)|([LT]\d)) ")


@dataclass
class SeedRun:
    """One seed of one campaign: its problems (one line each) and the checks they name."""

    campaign: str
    seed: int
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """True when the seed found no problem."""
        return not self.problems

    @property
    def checks(self) -> Counter[str]:
        """How many problems name each check (``L1``, a base-spec number, ``other``)."""
        named: Counter[str] = Counter()
        for problem in self.problems:
            match = _CHECK.match(problem)
            if match is None:
                named["other"] += 1
            else:
                named[f"§7.{match.group(1)}" if match.group(1) else match.group(2)] += 1
        return named


def _ledger_mutants() -> dict[str, Mutant]:
    """The ledger mutants by name, imported only when a sweep asks for one (tests only)."""
    from agentkeep.chaos._mutants.runtime import LEDGER_MUTANTS

    return LEDGER_MUTANTS


def run_seed(campaign: str, seed: int, mutant: str | None = None) -> SeedRun:
    """Play one seed of ``campaign``, under ``mutant`` if given."""
    if campaign not in CAMPAIGNS:
        raise ValueError(f"unknown campaign {campaign!r}: choose from {', '.join(CAMPAIGNS)}")
    if mutant is not None and mutant not in {*_ledger_mutants(), *_OWN_MUTANTS[campaign]}:
        raise ValueError(f"{campaign} cannot install the mutant {mutant!r}")
    started = time.monotonic()
    run = SeedRun(campaign=campaign, seed=seed)
    if campaign == "process_kills":
        from agentkeep.chaos.process_kills import run_campaign as kills

        result = kills(seed, mutant=mutant)
        run.problems = list(result.problems)
    elif campaign == "power_loss":
        from agentkeep.chaos.power import run_campaign as power

        run.problems = list(power(seed, mutant=mutant).problems)
    else:
        from agentkeep.chaos.lifecycle import lifecycle_races

        broken = _ledger_mutants()[mutant]() if mutant else contextlib.nullcontext()
        with broken:
            run.problems = [v.describe() for v in lifecycle_races(seed).violations]
    run.seconds = time.monotonic() - started
    return run


def first_catch(
    campaign: str, mutant: str, check: str, seeds: Iterable[int], *, jobs: int = 1
) -> SeedRun | None:
    """The first seed of ``seeds`` whose findings under ``mutant`` name ``check``, or None."""
    for run in _runs(campaign, list(seeds), mutant, jobs, stop_at=check):
        if run.checks[check]:
            return run
    return None


def _runs(
    campaign: str, seeds: list[int], mutant: str | None, jobs: int, stop_at: str | None = None
) -> Iterator[SeedRun]:
    """The seeds' runs in seed order, ``jobs`` at a time (a chunk ends early at a catch)."""
    if jobs <= 1:
        for seed in seeds:
            yield run_seed(campaign, seed, mutant)
        return
    with ProcessPoolExecutor(max_workers=jobs, initializer=_quiet) as pool:
        for start in range(0, len(seeds), jobs):
            chunk = seeds[start : start + jobs]
            runs = list(pool.map(run_seed, [campaign] * len(chunk), chunk, [mutant] * len(chunk)))
            yield from runs
            if stop_at is not None and any(run.checks[stop_at] for run in runs):
                return


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring). Returns the exit status: 0 when every
    seed held (or, with ``--mutants``, every mutant was caught), 1 otherwise."""
    parser = argparse.ArgumentParser(prog="python -m agentkeep.chaos.ledger_sweep")
    parser.add_argument("--campaign", action="append", choices=CAMPAIGNS, default=None)
    parser.add_argument("--seeds", type=int, default=None, help="seeds per campaign")
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--jobs", type=int, default=1, help="processes in parallel")
    group = parser.add_mutually_exclusive_group()
    mutants = sorted({*_ledger_mutants(), RERUN_FRAGILE, LYING_SYNC})
    group.add_argument("--mutant", choices=mutants, default=None)
    group.add_argument("--mutants", action="store_true", help="first seed catching each")
    args = parser.parse_args(argv)
    _quiet()
    campaigns = args.campaign or list(CAMPAIGNS)
    if args.mutants:
        return _mutant_table(campaigns, args.start, args.seeds, args.jobs)
    started = time.monotonic()
    rows: list[tuple[str, int, list[int], Counter[str], float]] = []
    for campaign in campaigns:
        began = time.monotonic()
        seeds = _seeds(campaign, args.start, args.seeds)
        failed: list[int] = []
        checks: Counter[str] = Counter()
        for run in _runs(campaign, seeds, args.mutant, args.jobs):
            checks += run.checks
            if not run.ok:
                failed.append(run.seed)
                print(f"{campaign} seed {run.seed}: {len(run.problems)} problem(s)", flush=True)
                for problem in run.problems[:10]:
                    print(f"  - {problem[:400]}", flush=True)
        rows.append((campaign, len(seeds), failed, checks, time.monotonic() - began))
    mutant = f" under mutant {args.mutant}" if args.mutant else ""
    print(f"ledger sweep{mutant}: wall {time.monotonic() - started:.1f} s")
    print(f"{'campaign':<18}{'seeds':>7}{'failed':>8}{'seconds':>9}  findings by check")
    for campaign, count, failed, checks, seconds in rows:
        found = ", ".join(f"{k} {v}" for k, v in sorted(checks.items())) or "-"
        print(f"{campaign:<18}{count:>7}{len(failed):>8}{seconds:>9.1f}  {found}")
        if failed:
            print(f"  failing seeds: {failed[:40]}")
    return 1 if any(failed for _, _, failed, _, _ in rows) else 0


def _seeds(campaign: str, start: int, count: int | None) -> list[int]:
    if count is not None:
        return list(range(start, start + count))
    return seeds_from_env(CI_SEEDS[campaign])


def _mutant_table(campaigns: list[str], start: int, count: int | None, jobs: int) -> int:
    escaped = 0
    print(f"{'mutant':<38}{'check':<7}{'campaign':<18}first seed")
    for mutant, (check, expected) in EXPECTED.items():
        for campaign in (c for c in expected if c in campaigns):
            seeds = _seeds(campaign, start, count)
            caught = first_catch(campaign, mutant, check, seeds, jobs=jobs)
            escaped += caught is None
            where = "ESCAPED" if caught is None else str(caught.seed)
            print(f"{mutant:<38}{check:<7}{campaign:<18}{where}", flush=True)
    return 1 if escaped else 0


def _quiet() -> None:
    # The campaigns inject faults and open copies of the store many times; each is logged.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))


if __name__ == "__main__":
    sys.exit(main())
