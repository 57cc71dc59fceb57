"""Real process campaign: an ``AgentSystem`` in a child process, SIGKILLed again and again.

With ``CHAOS_DATABASE`` (or ``--database URL``) each seed runs on a fresh schema of that
PostgreSQL server: the children open the same schema, and the parent reads it through a
read-only store instead of a copy of the file (the server has no integrity check to run).

Each seed plans 1–5 killed processes, then one left alone to finish, all on one state
directory (:mod:`agentkeep.chaos.process_worker` is the child). A process dies one of three
ways, drawn from the seed:

- ``store``: at store operation N (``AGENTKEEP_FAULT_AT`` + ``AGENTKEEP_FAULT_MODE=kill``,
  N up to a whole healthy run, so every index is reachable: the first ``BEGIN``, a statement
  inside a group commit, ``COMMIT``, and ``after_commit`` before any caller is answered);
- ``tool``: right after the N-th tool execution's side effect is on the ledger, before its
  result exists;
- ``timer``: the parent sends ``SIGKILL`` after a seeded delay (the one source of
  nondeterminism, on purpose: every outcome must still pass every invariant).

After every process the parent judges a copy of what is on disk (so the next child still
recovers from the raw crash image) with the harness's :class:`~agentkeep.chaos.Checker`,
plus ``PRAGMA integrity_check``; after the last one also the end state: every accepted message
once and in order, every call answered once after its call, the fragile tool at most once per
call across all processes (from the ledger file), nothing owed, ``answer-4``.

The checker's ledger checks run after every process (``L1`` dense, ``L2`` every fact with its
event, ``L3`` the events read after the previous kill unchanged). Every worker also runs a
:class:`~agentkeep.chaos.ledger_subscriber.RecordingSubscriber` that dies with it, disconnects
at seeded points and resumes from the last sequence it recorded; after the last process its
log must be exactly the durable ledger, each event once, in order (``L4``,
:func:`~agentkeep.chaos.ledger_subscriber.judge_subscriber_log`). The checker's turn checks
(``T1``–``T4``) run after every process too; every send carries an idempotency key and each
worker retries the first with a fresh message id, so every send of a key must have got the
same turn back, and only one of them as new (``T4``,
:func:`~agentkeep.chaos.turn_checks.judge_keyed_sends`).

``python -m agentkeep.chaos.process_kills --seeds N [--start S] [--jobs J]`` runs a sweep.

The pieces: :mod:`~agentkeep.chaos.process_kill_plan` (how each process dies),
:mod:`~agentkeep.chaos.process_kill_child` (running one worker process),
:mod:`~agentkeep.chaos.process_kill_world` (the directory they write, judged from copies);
this module plays a seed and judges it.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from agentkeep.chaos.backend import DATABASE_ENV, chaos_database, fresh_database, use_database
from agentkeep.chaos.campaigns import seeds_from_env
from agentkeep.chaos.checker import Checker
from agentkeep.chaos.ledger_subscriber import SubscriberLog, judge_subscriber_log
from agentkeep.chaos.process import DurableState, ProcessReport
from agentkeep.chaos.process_kill_child import ProcessRun, spawn_child
from agentkeep.chaos.process_kill_plan import Kill, KillKind, plan
from agentkeep.chaos.process_kill_world import DiskWorld, integrity_problem, store_exists
from agentkeep.chaos.process_worker import OFFERS, SUBSCRIBER_LOG
from agentkeep.chaos.turn_checks import completed_answers, judge_keyed_sends
from agentkeep.persistence.faults import FaultPlan

DEFAULT_SEEDS = 6
TEST_FILE = "tests/chaos/test_process_kills.py"

# The campaign's pieces, importable from here as they were before they had modules.
__all__ = [
    "DEFAULT_SEEDS",
    "DiskWorld",
    "Kill",
    "KillCampaignResult",
    "KillKind",
    "ProcessRun",
    "integrity_problem",
    "main",
    "plan",
    "run_campaign",
]


@dataclass
class KillCampaignResult:
    """One seed of the process-kill campaign: every child process run and every problem the final
    check found.
    """

    seed: int
    runs: list[ProcessRun] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    mutant: str | None = None
    # ``T5``'s reach: completed turns whose whole answer was judged, and those of them whose
    # answer continues a response a kill cut (docs/turns.md).
    answers_judged: int = 0
    answers_continued: int = 0

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems

    @property
    def replay(self) -> str:
        """The shell command that replays exactly this seed."""
        return f"CHAOS_SEED={self.seed} .venv/bin/pytest {TEST_FILE}"

    def describe(self) -> str:
        """A readable account, for failure messages and replays."""
        mutant = f" (mutant {self.mutant})" if self.mutant else ""
        lines = [f"process kills seed {self.seed}{mutant}: {len(self.problems)} problem(s)"]
        lines += [f"  - {problem}" for problem in self.problems]
        lines += [f"  {run.describe()}" for run in self.runs]
        lines.append(f"  replay: {self.replay}")
        return "\n".join(lines)


def run_campaign(
    seed: int,
    *,
    home: str | Path | None = None,
    mutant: str | None = None,
    kills: list[Kill] | None = None,
) -> KillCampaignResult:
    """Play seed ``seed`` (see the module docstring) in a temporary directory.

    Args:
        seed: Chooses the kills (see :func:`plan`).
        home: Where to keep the state directory and ledger (default: a temporary one).
        mutant: Run a deliberately broken runtime in every child (tests only).
        kills: Play these processes instead of the seed's plan (focused tests).
    """
    started = time.monotonic()
    result = KillCampaignResult(seed=seed, mutant=mutant)
    with (
        tempfile.TemporaryDirectory(prefix=f"chaos-kills-{seed}-") as scratch,
        fresh_database() as database,
    ):
        base = Path(home or scratch)
        base.mkdir(parents=True, exist_ok=True)
        world = DiskWorld(base / "state", seed, base / "ledger.jsonl", database=database)
        checker = Checker(world)
        for generation, kill in enumerate(kills or plan(seed), start=1):
            run = ProcessRun(generation=generation, kill=kill)
            result.runs.append(run)
            spawn_child(world, run, mutant)
            final = kill.kind is None
            report = ProcessReport(
                generation=generation,
                faults=FaultPlan(at=kill.at, mode="kill") if kill.kind == "store" else None,
                crashed=run.killed,
                idle=bool(run.result and run.result.get("idle")),
            )
            if run.hung:
                result.problems.append(f"process {generation} hung: {run.stderr_tail}")
            elif (final and run.returncode != 0) or run.returncode not in (0, -signal.SIGKILL):
                result.problems.append(
                    f"process {generation} exited {run.returncode}: {run.stderr_tail}"
                )
            if not store_exists(world):
                continue  # killed before the store was created: nothing to judge yet
            violations = checker.after_process(report, final=final)
            result.problems += [v.describe() for v in violations]
            result.problems += world.integrity_problems
            world.integrity_problems.clear()
            run.tool_gap = run.killed and _side_effect_without_result(
                world, checker.previous, generation
            )
            run.subscriber_killed = run.killed and any(
                line["kind"] == "kill" and line["generation"] == generation
                for line in SubscriberLog(base / SUBSCRIBER_LOG).lines()
            )
        result.problems += _ledger_problems(world)
        if checker.previous is not None:
            judged = [
                answer
                for _, _, answer in completed_answers(checker.previous.turns, checker.events)
                if answer is not None
            ]
            result.answers_judged = len(judged)
            result.answers_continued = sum(answer.cuts > 0 for answer in judged)
        sends = [line for line in world.read_ledger() if line["kind"] in ("accept", "retry")]
        keyed = judge_keyed_sends(sends, process=len(result.runs))
        result.problems += [v.describe() for v in keyed]
        subscriber = SubscriberLog(base / SUBSCRIBER_LOG)
        result.problems += [
            v.describe()
            for v in judge_subscriber_log(
                list(subscriber.lines()), checker.events, final_generation=len(result.runs)
            )
        ]
    result.seconds = time.monotonic() - started
    return result


def _side_effect_without_result(
    world: DiskWorld, state: DurableState | None, generation: int
) -> bool:
    """The process died after a tool's side effect and before its result was durable."""
    if state is None:
        return False
    pending = {p.call.call_id for p in state.pending}
    return any(
        line["kind"] == "tool" and line["generation"] == generation and line["call_id"] in pending
        for line in world.read_ledger()
    )


def _ledger_problems(world: DiskWorld) -> list[str]:
    problems: list[str] = []
    for line in world.read_ledger():
        if line["kind"] == "refused":
            problems.append(f"a zombie tool call was attempted: {line}")
    acknowledged = [e["id"] for e in world.read_ledger() if e["kind"] == "accept"]
    firsts = list(dict.fromkeys(acknowledged))
    if firsts != [o.id for o in OFFERS][: len(firsts)]:
        problems.append(f"messages acknowledged out of offer order: {firsts}")
    return problems


def main(argv: list[str] | None = None) -> int:
    """The command line ``python -m agentkeep.chaos.process_kills [--seeds N] [--start S] [--jobs J]
    [--mutant M]``.

    Returns:
        The exit status: 0 when every seed held, 1 otherwise.
    """
    parser = argparse.ArgumentParser(prog="python -m agentkeep.chaos.process_kills")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--mutant", default=None)
    parser.add_argument("--database", default=None, help=f"a postgresql:// URL ({DATABASE_ENV})")
    args = parser.parse_args(argv)
    with use_database(args.database or chaos_database()):
        if args.database:
            os.environ[DATABASE_ENV] = args.database  # the pool's processes run there too
        return _sweep(args)


def _sweep(args: argparse.Namespace) -> int:
    seeds = (
        list(range(args.start, args.start + args.seeds))
        if args.seeds is not None
        else seeds_from_env(DEFAULT_SEEDS)
    )
    started = time.monotonic()
    failed: list[int] = []
    kills: Counter[str] = Counter()
    answers = Counter[str]()
    _quiet()
    with ProcessPoolExecutor(max_workers=args.jobs, initializer=_quiet) as pool:
        runs = pool.map(_campaign_for_pool, seeds, [args.mutant] * len(seeds))
        for result in runs:
            answers["judged"] += result.answers_judged
            answers["continued"] += result.answers_continued
            for run in result.runs:
                kills[_coverage_key(run)] += 1
                if run.result and run.result.get("max_group_size", 0) > 1:
                    kills["(finished runs with a group commit of 2+)"] += 1
            if not result.ok:
                failed.append(result.seed)
                print(result.describe(), flush=True)
    total = sum(count for key, count in kills.items() if not key.startswith(("finished", "(")))
    print(
        f"seeds {len(seeds)}  failed {len(failed)} {failed}  kills {total}  "
        f"wall {time.monotonic() - started:.1f} s"
    )
    print(
        f"  turn results judged whole (T5) {answers['judged']}, "
        f"continuing a cut response {answers['continued']}"
    )
    for key, count in sorted(kills.items()):
        print(f"  {key:<40}{count:>6}")
    return 1 if failed else 0


def _quiet() -> None:
    # Every campaign opens copies of the store many times; the store logs each open.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))


def _campaign_for_pool(seed: int, mutant: str | None) -> KillCampaignResult:
    return run_campaign(seed, mutant=mutant)


def _coverage_key(run: ProcessRun) -> str:
    if not run.killed:
        return "finished"
    if run.subscriber_killed:
        return "subscriber: event received, not recorded"
    if run.tool_gap:
        return f"{run.kill.kind}: side effect without result"
    if run.died_at:
        return f"store: {run.died_at.split('(')[1].rstrip(')')}"
    return f"{run.kill.kind}"


if __name__ == "__main__":
    sys.exit(main())
