"""Process campaign on a real PostgreSQL server: the faults only a server has.

Each seed plays 1–3 faulted worker processes (:mod:`agentkeep.chaos.process_worker`, the
process-kill campaign's child) on one fresh schema, then one left alone to finish. While a
faulted worker runs, the parent waits until its writer holds the store's lock, then hits it
with a seeded fault:

- ``terminate``: ``pg_terminate_backend`` of the writer's backend (found in ``pg_locks`` /
  ``pg_stat_activity`` by the worker's ``application_name``), 1–3 times, seeded delays apart;
- ``restart``: the server stopped in ``immediate`` mode (no shutdown checkpoint: it recovers
  from its WAL) and started again after a seeded pause. This needs a server of its own, so
  the campaign starts a throwaway cluster (``scripts/postgres_cluster.py``) for the sweep;
- ``takeover``: the writer's backend terminated and, at once, a second process (the parent,
  with a state directory of its own) races ``open_store`` on the same URL. Exactly one wins:
  either the worker re-takes its lock (the thief gets ``StoreLockedError``), or the thief
  owns the store, writes (creates an agent of its own) and closes, and the worker must stop
  writing for good (``StoreOwnershipLostError``).

The checks, after every process: the process-kill campaign's :class:`~agentkeep.chaos.Checker`
(every accepted message answered once and in order, non-durable tools at most once, calls
answered once, ledger dense, every fact with its event, the ledger read before unchanged),
the SIGKILL-surviving subscriber's log exactly the ledger, the keyed sends; and **no write
after ownership was lost**: the campaign installs, on every table of the schema, a statement
trigger appending the writing session's ``application_name`` (which carries its owner token
``w=…``) to ``chaos_write_log``; the tokens in that log must come in blocks (``O1``): a token
that wrote again after another owner's write wrote while the store was not its own. The
thief also checks that exactly one of the two held the store (``O2``).

The mutant ``reconnect_without_lock`` (a writer that reconnects without taking the lock or
checking the owner row) must be caught by ``O1``/``O2``.

``python -m agentkeep.chaos.pg_server_faults --seeds N [--database URL]``: ``terminate`` and
``takeover`` run on ``--database`` (or ``CHAOS_DATABASE``) when given, else on the campaign's
own cluster, which ``restart`` always uses.
"""

from __future__ import annotations

import argparse
import logging
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import structlog

from agentkeep.chaos.backend import chaos_database, fresh_database
from agentkeep.chaos.campaign_result import seeds_from_env, verdict_line
from agentkeep.chaos.checker import Checker
from agentkeep.chaos.ledger_subscriber import SubscriberLog, judge_subscriber_log
from agentkeep.chaos.pg_server import (
    OwnCluster,
    admin,
    install_write_log,
    judge_write_log,
    owner_token,
    wait_for_writer,
    write_log,
    writer_backend,
)
from agentkeep.chaos.process import ProcessReport
from agentkeep.chaos.process_kill_child import ProcessRun, spawn_child
from agentkeep.chaos.process_kill_plan import Kill
from agentkeep.chaos.process_kill_world import DiskWorld, store_exists
from agentkeep.chaos.process_worker import OFFERS, SUBSCRIBER_LOG
from agentkeep.chaos.turn_checks import judge_keyed_sends

FaultKind = Literal["terminate", "restart", "takeover"]
FAULTS: tuple[FaultKind, ...] = ("terminate", "restart", "takeover")
DEFAULT_SEEDS = 3
RECONNECT_WITHOUT_LOCK = "reconnect_without_lock"
WRITER_WAIT_SECONDS = 30.0


@dataclass
class Fault:
    """One seeded fault of one process."""

    kind: FaultKind
    delays: list[float]  # seconds after the writer holds the lock, one per hit
    pause: float = 0.0  # restart: how long the server stays down

    def describe(self) -> str:
        """The fault in one line: its kind, when it hit, how long the server stayed down."""
        hits = ", ".join(f"{d:.2f}" for d in self.delays)
        extra = f", down {self.pause:.2f} s" if self.kind == "restart" else ""
        return f"{self.kind} at +[{hits}] s{extra}"


@dataclass
class FaultRun:
    """What one fault did."""

    fault: Fault
    hits: int = 0  # faults that found their target
    thief: str | None = None  # takeover: "won", "refused" or what went wrong


@dataclass
class ServerFaultResult:
    """One seed's outcome."""

    seed: int
    mutant: str | None = None
    runs: list[ProcessRun] = field(default_factory=list)
    faults: list[FaultRun] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    writes: int = 0  # statements the write log recorded
    owners: int = 0  # distinct owner tokens among them

    @property
    def ok(self) -> bool:
        """True if every check held."""
        return not self.problems

    def describe(self) -> str:
        """The seed's verdict, its faults and runs, and each problem found, for the console."""
        lines = [verdict_line("pg_server_faults", self.seed, self.mutant, self.ok, self.seconds)]
        for index, run in enumerate(self.runs):
            record = self.faults[index] if index < len(self.faults) else None
            what = (
                f"{record.fault.describe()}, hits {record.hits}, thief {record.thief}"
                if record is not None
                else "left alone"
            )
            lines.append(
                f"  process {run.generation} ({what}): exit {run.returncode} "
                f"{run.result} {run.seconds:.2f} s"
            )
        lines.append(f"  write log: {self.writes} writes by {self.owners} owners")
        lines += [f"  ! {problem}" for problem in self.problems]
        lines.append(
            f"  replay: python -m agentkeep.chaos.pg_server_faults --seeds 1 --start {self.seed}"
        )
        return "\n".join(lines)


def plan(seed: int, kinds: tuple[FaultKind, ...] = FAULTS) -> list[Fault]:
    """The seed's faulted processes (1–3), each with its fault."""
    rng = random.Random(seed ^ 0x9A5E)
    faults: list[Fault] = []
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(kinds)
        hits = rng.randint(1, 3) if kind == "terminate" else 1
        # Within the worker's run: a faulted process runs about 0.4–1 s from the moment its
        # writer holds the store (a later moment found it finished: no fault landed).
        delays = [round(rng.uniform(0.0, 0.25), 3) for _ in range(hits)]
        faults.append(Fault(kind, delays, pause=round(rng.uniform(0.1, 1.5), 3)))
    return faults


# -- playing a seed ----------------------------------------------------------------------------


def _inject(
    fault: Fault,
    record: FaultRun,
    url: str,
    child: subprocess.Popen[str],
    cluster: OwnCluster | None,
    scratch: Path,
    problems: list[str],
) -> None:
    backend = wait_for_writer(url, child)
    if backend is None:
        return  # the worker finished or died before its writer held the store
    for delay in fault.delays:
        time.sleep(delay)  # a seeded moment in the worker's run: the fault's timing is the test
        if child.poll() is not None:
            return
        if fault.kind == "restart":
            assert cluster is not None
            cluster.restart(fault.pause)
            record.hits += 1
            continue
        backend = writer_backend(url, child.pid)
        if backend is None:
            continue
        with admin(url) as session:
            session.execute("SELECT pg_terminate_backend(%s)", (backend,))
        record.hits += 1
        if fault.kind == "takeover":
            record.thief = _steal(url, child.pid, scratch, problems)


def _steal(url: str, victim: int, scratch: Path, problems: list[str]) -> str:
    """Race the victim for the store; if won, write and close. Checks ``O2`` either way."""
    from agentkeep.errors import StoreLockedError
    from agentkeep.persistence.opening import open_store
    from agentkeep.types.records import AgentRow

    home = scratch / f"thief-{time.monotonic_ns()}"
    try:
        # A bare store, not a system: a system would run the worker's agent too.
        store = open_store(home, database=url)
    except StoreLockedError as error:
        holder = getattr(error, "holder_pid", None)
        if holder not in (None, victim):
            problems.append(f"O2: the thief was refused by {holder}, not by the worker {victim}")
        return "refused"
    try:
        victim_backend = writer_backend(url, victim)
        if victim_backend is not None:
            problems.append(
                f"O2: the thief and the worker {victim} (backend {victim_backend}) both hold "
                "the store's lock"
            )
        thief = f"thief{len(list(scratch.glob('thief-*')))}"
        store.transact(lambda tx: tx.agents.create(AgentRow(id=thief, config={})))  # a write
    finally:
        store.close()
    return "won"


def run_campaign(
    seed: int,
    *,
    database: str | None = None,
    mutant: str | None = None,
    kinds: tuple[FaultKind, ...] = FAULTS,
    cluster: OwnCluster | None = None,
) -> ServerFaultResult:
    """Play one seed (see the module). ``database``: the server for ``terminate`` and
    ``takeover`` (default :func:`chaos_database`, else the campaign's own cluster, which
    ``restart`` always uses and ``cluster`` may share across seeds)."""
    started = time.monotonic()
    result = ServerFaultResult(seed=seed, mutant=mutant)
    faults = plan(seed, kinds)
    owned = cluster is None and (
        "restart" in {f.kind for f in faults} or not (database or chaos_database())
    )
    own = cluster or (OwnCluster() if owned else None)
    try:
        if "restart" in {f.kind for f in faults} or not (database or chaos_database()):
            assert own is not None
            server = own.start()
        else:
            server = database or chaos_database() or ""
        with (
            tempfile.TemporaryDirectory(prefix=f"chaos-pgfaults-{seed}-") as scratch,
            fresh_database(server) as url,
        ):
            assert url is not None
            _play(seed, url, faults, own, Path(scratch), mutant, result)
    finally:
        if owned and own is not None:
            own.close()
    result.seconds = time.monotonic() - started
    return result


def _play(
    seed: int,
    url: str,
    faults: list[Fault],
    cluster: OwnCluster | None,
    base: Path,
    mutant: str | None,
    result: ServerFaultResult,
) -> None:
    from agentkeep.persistence.opening import open_store

    # The store's tables exist before the first worker, so the write log sees every write.
    open_store(base / "creator", database=url).close()
    install_write_log(url)
    world = DiskWorld(base / "state", seed, base / "ledger.jsonl", database=url)
    checker = Checker(world)
    schedule: list[Fault | None] = [*faults, None]
    for generation, fault in enumerate(schedule, start=1):
        run = ProcessRun(generation=generation, kill=Kill(kind=None))
        result.runs.append(run)
        during = None
        if fault is not None:
            record = FaultRun(fault)
            result.faults.append(record)

            def during(
                child: subprocess.Popen[str], f: Fault = fault, r: FaultRun = record
            ) -> None:
                _inject(f, r, url, child, cluster, base, result.problems)

        spawn_child(
            world,
            run,
            mutant,
            during=during,
            # A faulted process gets every offer: its run must outlast the fault's moment
            # (with fewer, a fast writer finished before a late restart could land).
            offers=len(OFFERS),
        )
        final = fault is None
        if run.hung:
            result.problems.append(f"process {generation} hung: {run.stderr_tail}")
        elif final and run.returncode != 0:
            result.problems.append(f"the last process exited {run.returncode}: {run.stderr_tail}")
        elif run.returncode not in (0, 1):
            result.problems.append(
                f"process {generation} exited {run.returncode}: {run.stderr_tail}"
            )
        if not store_exists(world):
            continue
        report = ProcessReport(
            generation=generation,
            faults=None,
            crashed=run.returncode != 0,
            idle=bool(run.result and run.result.get("idle")),
        )
        result.problems += [v.describe() for v in checker.after_process(report, final=final)]
    for line in world.read_ledger():
        if line["kind"] == "refused":
            result.problems.append(f"a zombie tool call was attempted: {line}")
    sends = [line for line in world.read_ledger() if line["kind"] in ("accept", "retry")]
    result.problems += [v.describe() for v in judge_keyed_sends(sends, process=len(result.runs))]
    subscriber = SubscriberLog(base / SUBSCRIBER_LOG)
    result.problems += [
        v.describe()
        for v in judge_subscriber_log(
            list(subscriber.lines()), checker.events, final_generation=len(result.runs)
        )
    ]
    writes = write_log(url)
    result.writes = len(writes)
    result.owners = len({owner_token(app) for app in writes})
    result.problems += judge_write_log(writes)


def main(argv: list[str] | None = None) -> int:
    """``python -m agentkeep.chaos.pg_server_faults [--seeds N] [--start S] [--database URL]
    [--fault KIND ...] [--mutant M]``; exit status 1 if a seed failed."""
    parser = argparse.ArgumentParser(prog="python -m agentkeep.chaos.pg_server_faults")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--database", default=None)
    parser.add_argument("--fault", action="append", choices=FAULTS, default=None)
    parser.add_argument("--mutant", default=None)
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    seeds = (
        list(range(args.start, args.start + args.seeds))
        if args.seeds is not None
        else seeds_from_env(DEFAULT_SEEDS)
    )
    kinds = tuple(args.fault) if args.fault else FAULTS
    cluster = OwnCluster()
    started = time.monotonic()
    failed: list[int] = []
    hits: Counter[str] = Counter()
    try:
        for seed in seeds:
            result = run_campaign(
                seed, database=args.database, mutant=args.mutant, kinds=kinds, cluster=cluster
            )
            for record in result.faults:
                hits[record.fault.kind] += record.hits
                if record.thief:
                    hits[f"takeover: thief {record.thief}"] += 1
            if not result.ok:
                failed.append(seed)
                print(result.describe(), flush=True)
    finally:
        cluster.close()
    print(
        f"seeds {len(seeds)}  failed {len(failed)} {failed}  "
        f"wall {time.monotonic() - started:.1f} s"
    )
    for key, count in sorted(hits.items()):
        print(f"  {key:<32}{count:>6}")
    return 1 if failed else 0


__all__ = [
    "DEFAULT_SEEDS",
    "FAULTS",
    "RECONNECT_WITHOUT_LOCK",
    "Fault",
    "OwnCluster",
    "ServerFaultResult",
    "judge_write_log",
    "plan",
    "run_campaign",
]

if __name__ == "__main__":
    sys.exit(main())
