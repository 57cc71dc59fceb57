"""Run chaos suites from the command line: ``python -m agentkeep.chaos [SUITE ...]``.

``--seeds N`` (default ``CHAOS_SEEDS`` or 15) runs seeds ``start..start+N-1``; ``--seed S``
runs one. ``--database URL`` (or ``CHAOS_DATABASE``) runs them on that PostgreSQL server,
each seed in a fresh schema (:mod:`agentkeep.chaos.backend`). Every failing seed is printed
with its violations and replay command, then a summary table; the exit status is 1 if any
seed failed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

from agentkeep.chaos.backend import DATABASE_ENV, SQLITE_ONLY, chaos_database, use_database
from agentkeep.chaos.campaigns import SUITES, seeds_from_env
from agentkeep.chaos.quiet import quiet_logs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentkeep.chaos")
    parser.add_argument("suites", nargs="*", choices=[[], *SUITES], default=[])
    parser.add_argument("--seeds", type=int, default=None, help="how many seeds per suite")
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--seed", type=int, default=None, help="run only this seed")
    parser.add_argument(
        "--database",
        default=None,
        help="a postgresql:// URL: run on that server, each seed in a fresh schema "
        f"(default: {DATABASE_ENV}, else SQLite)",
    )
    args = parser.parse_args(argv)
    with quiet_logs(), use_database(args.database or chaos_database()):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    if args.seed is not None:
        seeds = [args.seed]
    elif args.seeds is not None:
        seeds = list(range(args.start, args.start + args.seeds))
    else:
        seeds = seeds_from_env()
    rows: list[tuple[str, int, int, float]] = []
    counted: dict[str, Counter[str]] = {}
    for suite in args.suites or list(SUITES):
        if chaos_database() is not None and suite in SQLITE_ONLY:
            print(f"{suite}: skipped on PostgreSQL ({SQLITE_ONLY[suite]})", flush=True)
            continue
        started = time.monotonic()
        failed = 0
        for seed in seeds:
            result = SUITES[suite](seed)
            counted.setdefault(suite, Counter()).update(result.counts)
            if not result.ok:
                failed += 1
                print(result.describe(), flush=True)
        rows.append((suite, len(seeds), failed, time.monotonic() - started))
    print(f"{'suite':<24}{'seeds':>8}{'failed':>8}{'seconds':>10}")
    for suite, count, failed, seconds in rows:
        print(f"{suite:<24}{count:>8}{failed:>8}{seconds:>10.1f}")
    for suite, counts in counted.items():  # what a suite counted as it checked
        if counts:
            print(f"{suite}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 1 if any(failed for _, _, failed, _ in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
