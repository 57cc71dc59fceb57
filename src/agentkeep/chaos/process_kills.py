"""Real process campaign: an ``AgentSystem`` in a child process, SIGKILLed again and again.

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
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import apsw
import structlog

from agentkeep.chaos.campaigns import seeds_from_env
from agentkeep.chaos.checker import Checker
from agentkeep.chaos.ledger_checks import read_all
from agentkeep.chaos.ledger_subscriber import (
    SUBSCRIBER_ENV,
    SUBSCRIBER_KILL_ENV,
    SubscriberLog,
    judge_subscriber_log,
)
from agentkeep.chaos.process import DurableState, ProcessReport, archived_users, read_durable
from agentkeep.chaos.process_worker import (
    AGENT_ID,
    KILL_AT_TOOL_ENV,
    MUTANT_ENV,
    OFFERS,
    SUBSCRIBER_LOG,
)
from agentkeep.chaos.tools import Ledger, LedgerEntry
from agentkeep.chaos.turn_checks import judge_keyed_sends
from agentkeep.chaos.world import ChaosWorld
from agentkeep.model import SessionEvent, UserRecord
from agentkeep.persistence.faults import FAULT_AT_ENV, FAULT_MODE_ENV, FaultPlan
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.store import DATABASE_NAME, Store

KillKind = Literal["store", "tool", "timer"]
# Measured on 2 cores: the first process (two messages from an empty directory) runs about
# 150 store operations, 2 tool calls and 0.12-0.17 s from READY to exit; a later one (one new
# message, plus whatever its predecessor left) 30-130 operations, 0-2 calls, 0.06-0.12 s. The
# bounds reach just past that, so a few kills never fire (that process finishes its work).
FIRST_BOUNDS = (160, 2, 0.16)  # store operations, tool executions, seconds
LATER_BOUNDS = (110, 2, 0.12)
DEFAULT_SEEDS = 6
CHILD_TIMEOUT_SECONDS = 60.0
TEST_FILE = "tests/chaos/test_process_kills.py"


@dataclass(frozen=True)
class Kill:
    """How one process is planned to die (``kind`` None: left alone to finish)."""

    kind: KillKind | None
    at: int = 0  # the store operation or tool execution
    delay_seconds: float = 0.0
    # Also: the ledger subscriber kills the process when it receives its N-th event of this
    # process, before recording it (0: it does not), whichever kill comes first.
    subscriber_at: int = 0

    def describe(self) -> str:
        """A readable account, for failure messages and replays."""
        also = f" or at the subscriber's event #{self.subscriber_at}" if self.subscriber_at else ""
        if self.kind is None:
            return "left alone"
        if self.kind == "timer":
            return f"timer SIGKILL after {self.delay_seconds:.3f} s{also}"
        return f"{self.kind} kill at {self.kind} #{self.at}{also}"


@dataclass
class ProcessRun:
    """What one child process did."""

    generation: int
    kill: Kill
    returncode: int | None = None
    result: dict[str, Any] | None = None
    seconds: float = 0.0  # from READY to exit
    died_at: str | None = None  # the operation the store's fault point named
    tool_gap: bool = False  # died with a side effect on record and its result not durable
    subscriber_killed: bool = False  # the subscriber killed it, an event received, unrecorded
    hung: bool = False  # still running a minute after it was due to finish (then killed)
    stderr_tail: list[str] = field(default_factory=list)

    @property
    def killed(self) -> bool:
        """True when the process died of SIGKILL."""
        return self.returncode == -signal.SIGKILL

    def describe(self) -> str:
        """A readable account, for failure messages and replays."""
        if self.killed:
            outcome = "killed" + (f" at {self.died_at}" if self.died_at else "")
            outcome += " by the subscriber" if self.subscriber_killed else ""
            outcome += " (side effect without result)" if self.tool_gap else ""
        else:
            outcome = f"exit {self.returncode} {self.result}"
        return f"process {self.generation} ({self.kill.describe()}): {outcome} {self.seconds:.2f} s"


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


def plan(seed: int) -> list[Kill]:
    """The seed's processes: 1–5 killed ones, then one left alone."""
    rng = random.Random(seed)
    kills: list[Kill] = []
    for number in range(rng.randint(1, 5)):
        operations, tools, seconds = FIRST_BOUNDS if number == 0 else LATER_BOUNDS
        kind: KillKind = rng.choice(["store", "store", "tool", "timer"])
        if kind == "store":
            kills.append(Kill("store", at=rng.randint(1, operations)))
        elif kind == "tool":
            kills.append(Kill("tool", at=rng.randint(1, tools)))
        else:
            kills.append(Kill("timer", delay_seconds=rng.uniform(0.0, seconds)))
    # The subscriber's own kill points come from a second generator, so the kills above
    # are what they were before the subscriber existed.
    subscriber = random.Random(seed ^ 0x5B5C81BE)
    for index, kill in enumerate(kills):
        if subscriber.random() < 1 / 3:
            kills[index] = replace(kill, subscriber_at=subscriber.randint(1, 10))
    return [*kills, Kill(None)]


class DiskWorld(ChaosWorld):
    """The harness's world over a directory real processes write: durable state is read
    from a copy (recovery and checkpoint happen there, never on the disk the next child
    recovers from), and acceptance comes from the ledger file."""

    def __init__(self, home: Path, seed: int, ledger: Path) -> None:
        super().__init__(home, seed, agent_id=AGENT_ID)
        self.ledger_path = ledger
        self.offers = list(OFFERS)
        self.integrity_problems: list[str] = []

    def read_ledger(self) -> Iterator[dict[str, Any]]:
        """The tool executions the child processes logged to the on-disk ledger, in order (none if
        it was never written).
        """
        if not self.ledger_path.exists():
            return
        for line in self.ledger_path.read_text().splitlines():
            yield json.loads(line)

    def durable(self) -> DurableState:
        return self.durable_with_events()[0]

    def durable_with_events(self) -> tuple[DurableState, list[SessionEvent]]:
        agent_id = self.agent_id

        def read(tx: Transaction) -> tuple[DurableState, list[SessionEvent]]:
            return read_durable(tx, agent_id), read_all(
                lambda after: tx.events(agent_id, after, 1000)
            )

        with tempfile.TemporaryDirectory(prefix="chaos-copy-") as scratch:
            copy = Path(scratch)
            for suffix in ("", "-wal", "-journal"):  # never -shm: it is rebuilt from the WAL
                source = self.home / (DATABASE_NAME + suffix)
                if source.exists():
                    shutil.copyfile(source, copy / source.name)
            problem = integrity_problem(copy / DATABASE_NAME)
            if problem:
                self.integrity_problems.append(problem)
            with Store.open(copy) as store:
                state, events = store.read(read)
        self._learn_acceptance(state)
        return state, events

    def _learn_acceptance(self, state: DurableState) -> None:
        """Accepted = acknowledged on the ledger, or durably present though its sender died
        before hearing back. Each process offers in the same order, so that is the order."""
        acknowledged = {e["id"] for e in self.read_ledger() if e["kind"] == "accept"}
        present = {r.message_id for r in state.records if isinstance(r, UserRecord)}
        present |= archived_users(state)
        present |= {q.id for q in state.queued}
        self.accept_order = [o.id for o in self.offers if o.id in acknowledged | present]
        ledger = Ledger()
        for line in self.read_ledger():
            if line["kind"] == "tool":
                del line["kind"], line["pid"]
                ledger.record(LedgerEntry(**line))
        self.ledger = ledger


def integrity_problem(database: Path) -> str | None:
    """SQLite's ``PRAGMA integrity_check`` of ``database``: None when it is sound (or absent), else
    what it reported.
    """
    if not database.exists():
        return None
    connection = apsw.Connection(str(database))
    try:
        rows = connection.execute("PRAGMA integrity_check").fetchall()
    finally:
        connection.close()
    return None if rows == [("ok",)] else f"integrity_check: {rows}"


def _spawn(world: DiskWorld, run: ProcessRun, mutant: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k not in (FAULT_AT_ENV, KILL_AT_TOOL_ENV)}
    kill = run.kill
    if kill.kind == "store":
        env[FAULT_AT_ENV], env[FAULT_MODE_ENV] = str(kill.at), "kill"
    elif kill.kind == "tool":
        env[KILL_AT_TOOL_ENV] = str(kill.at)
    if mutant is not None:
        env[MUTANT_ENV] = mutant
    # The subscriber's disconnects: a pure function of the seed and the process.
    env[SUBSCRIBER_ENV] = str(world.seed * 16 + run.generation)
    env.pop(SUBSCRIBER_KILL_ENV, None)
    if kill.subscriber_at:
        env[SUBSCRIBER_KILL_ENV] = str(kill.subscriber_at)
    (world.ledger_path.with_name("generation")).write_text(str(run.generation))
    command = [sys.executable, "-m", "agentkeep.chaos.process_worker"]
    # Each killed process brings one more message than the last (so every restart has new
    # work to be killed in); the one left alone offers them all.
    offers = len(OFFERS) if kill.kind is None else min(run.generation + 1, len(OFFERS))
    command += [str(world.home), str(world.ledger_path), str(run.generation), str(offers)]
    stderr_path = world.ledger_path.with_name(f"stderr-{run.generation}")
    with (
        stderr_path.open("w") as stderr,
        subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=stderr, env=env, text=True
        ) as child,
    ):
        assert child.stdout is not None
        ready = child.stdout.readline()
        started = time.monotonic()
        timed = kill.kind == "timer" and bool(ready)
        try:
            child.wait(kill.delay_seconds if timed else CHILD_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            run.hung = not timed
            child.send_signal(signal.SIGKILL)
        # Not communicate(timeout=...): it reads the raw pipe and would miss whatever
        # readline() already buffered (READY and RESULT can arrive in one read).
        out = ready + child.stdout.read()
        run.returncode = child.wait(CHILD_TIMEOUT_SECONDS)
        run.seconds = time.monotonic() - started
    for line in out.splitlines():
        if line.startswith("RESULT "):
            run.result = json.loads(line.removeprefix("RESULT "))
    errors = stderr_path.read_text().splitlines()
    run.stderr_tail = errors[-8:]
    for line in errors:
        if '"store_fault_injected"' in line:
            event = json.loads(line)
            run.died_at = f"operation {event['operation']} ({event['label']})"


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
    with tempfile.TemporaryDirectory(prefix=f"chaos-kills-{seed}-") as scratch:
        base = Path(home or scratch)
        base.mkdir(parents=True, exist_ok=True)
        world = DiskWorld(base / "state", seed, base / "ledger.jsonl")
        checker = Checker(world)
        for generation, kill in enumerate(kills or plan(seed), start=1):
            run = ProcessRun(generation=generation, kill=kill)
            result.runs.append(run)
            _spawn(world, run, mutant)
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
            if not (world.home / DATABASE_NAME).exists():
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
    args = parser.parse_args(argv)
    seeds = (
        list(range(args.start, args.start + args.seeds))
        if args.seeds is not None
        else seeds_from_env(DEFAULT_SEEDS)
    )
    started = time.monotonic()
    failed: list[int] = []
    kills: Counter[str] = Counter()
    _quiet()
    with ProcessPoolExecutor(max_workers=args.jobs, initializer=_quiet) as pool:
        runs = pool.map(_campaign_for_pool, seeds, [args.mutant] * len(seeds))
        for result in runs:
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
