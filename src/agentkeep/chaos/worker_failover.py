"""Failover and fencing campaign: real ``agentkeep serve --partitions`` workers killed and stopped.

Each seed starts three workers (``agentkeep serve --database URL --partitions 6 --lease 2``)
on a fresh schema, creates a definition and sessions, and runs three clients that send
messages (until the last fault is over) with idempotency keys over REST to random workers,
again with the same key after any error, timeout or 503 (``partition_unavailable``).
Meanwhile the seed's schedule, in a seeded order, SIGKILLs a worker (then starts a new one
in its place) and SIGSTOPs a worker past its lease (its peers reap it and take its
partitions), then SIGCONTs it. The time from each signal until the other workers run every
partition is the *takeover* time.

After the run (every worker healthy, every partition owned, no live turn), the checks read
the schema:

- ``K1``: every accepted key has exactly one turn, the one first answered, completed;
- ``K2``: every accepted message is answered exactly once (one ``message.accepted`` event and
  one assistant reply after it in its session's conversation);
- ``L1``: each session's ledger is dense (sequences ``1..n``);
- ``T1``: no turn is left live (queued, running, cancelling);
- ``F1``/``F2``: the fence (:mod:`agentkeep.chaos.worker_fence`): every event written by the
  partition's current owner, and per partition the writers' epochs never go back.

The mutant ``keep_writing_after_lost`` (installed in every worker before its CLI runs) is the
writer of a partition's system that reconnects after its session was cut without retaking
the partition's lock or checking the ownership row: a stopped worker, reaped, resumes and
writes over the new owner. ``F1``/``F2`` must catch it.

``python -m agentkeep.chaos.worker_failover --seeds N [--start S] [--database URL]``: on
``--database`` (or ``CHAOS_DATABASE``) when given, else on a throwaway cluster of its own.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx

from agentkeep.chaos.backend import chaos_database, fresh_database
from agentkeep.chaos.campaign_result import seeds_from_env, verdict_line
from agentkeep.chaos.failover_clients import CLIENTS, MESSAGES, SEND_SECONDS, Sent, send_keyed
from agentkeep.chaos.failover_workers import (
    HEADERS,
    KEEP_WRITING_AFTER_LOST,
    LEASE,
    SETTLE_SECONDS,
    WORKERS,
    Pool,
    wait_until,
)
from agentkeep.chaos.pg_server import OwnCluster
from agentkeep.chaos.worker_fence import (
    fence_log,
    install_fence_log,
    judge_fence_log,
    judge_run,
    live_turns,
)

#: Seeds a run plays by default (``CHAOS_SEEDS`` overrides): about 25 s each.
DEFAULT_SEEDS = 2
SESSIONS = 6

FaultKind = Literal["kill", "stop"]


@dataclass(frozen=True)
class Fault:
    """One seeded fault: its kind, its worker slot, its delay after the previous one settled,
    and (``stop``) how long the worker stays stopped."""

    kind: FaultKind
    slot: int
    delay: float
    stopped: float = 0.0

    def describe(self) -> str:
        """The fault in one line."""
        extra = f" for {self.stopped:.2f} s" if self.kind == "stop" else ""
        return f"{self.kind} worker {self.slot} after {self.delay:.2f} s{extra}"


def plan(seed: int, lease: float = LEASE) -> list[Fault]:
    """The seed's faults: one ``kill`` and one ``stop`` in a seeded order, sometimes a third."""
    rng = random.Random(seed ^ 0xFA11)
    kinds: list[FaultKind] = ["kill", "stop"]
    rng.shuffle(kinds)
    if rng.random() < 0.5:
        kinds.append(rng.choice(("kill", "stop")))
    return [
        Fault(
            kind,
            rng.randrange(WORKERS),
            round(rng.uniform(0.3, 2.0), 3),
            round(lease * rng.uniform(1.5, 2.5), 3) if kind == "stop" else 0.0,
        )
        for kind in kinds
    ]


@dataclass
class FaultRecord:
    """What one fault did: seconds until the others ran every partition (None: never)."""

    fault: Fault
    takeover: float | None = None
    note: str = ""


@dataclass
class FailoverResult:
    """One seed's outcome."""

    seed: int
    mutant: str | None = None
    faults: list[FaultRecord] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    accepted: int = 0
    retries: int = 0
    unavailable: int = 0
    writes: int = 0
    epochs: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """True if every check held."""
        return not self.problems

    def describe(self) -> str:
        """The verdict, the faults with their takeover times, the problems, the replay."""
        lines = [verdict_line("worker_failover", self.seed, self.mutant, self.ok, self.seconds)]
        for record in self.faults:
            took = "never" if record.takeover is None else f"{record.takeover:.2f} s"
            note = f" ({record.note})" if record.note else ""
            lines.append(f"  {record.fault.describe()}: takeover {took}{note}")
        lines.append(
            f"  {self.accepted} keys accepted, {self.retries} retries "
            f"({self.unavailable} x 503), {self.writes} event writes, {self.epochs} owner stamps"
        )
        if self.reasons:
            why = ", ".join(f"{k} x{v}" for k, v in sorted(self.reasons.items()))
            lines.append(f"  asked again after: {why}")
        lines += [f"  ! {problem}" for problem in self.problems]
        lines.append(
            f"  replay: python -m agentkeep.chaos.worker_failover --seeds 1 --start {self.seed}"
        )
        return "\n".join(lines)


# -- one seed ----------------------------------------------------------------------------------


def run_campaign(
    seed: int,
    *,
    database: str | None = None,
    mutant: str | None = None,
    lease: float = LEASE,
    cluster: OwnCluster | None = None,
    settle: float = SETTLE_SECONDS,
) -> FailoverResult:
    """Play one seed (see the module) on ``database`` or ``CHAOS_DATABASE``, else on a
    throwaway cluster (``cluster`` may share one across seeds). ``settle``: how long the
    cluster may take to finish every turn at the end (a mutant's lost turns never do)."""
    started = time.monotonic()
    result = FailoverResult(seed=seed, mutant=mutant)
    server = database or chaos_database()
    own = None
    if not server:
        own = cluster or OwnCluster()
        server = own.start()
    try:
        with (
            tempfile.TemporaryDirectory(prefix=f"chaos-failover-{seed}-") as scratch,
            fresh_database(server) as url,
        ):
            assert url is not None
            _play(seed, url, Path(scratch), mutant, (lease, settle), result)
    finally:
        if own is not None and cluster is None:
            own.close()
    result.seconds = time.monotonic() - started
    return result


def _play(
    seed: int,
    url: str,
    base: Path,
    mutant: str | None,
    times: tuple[float, float],
    result: FailoverResult,
) -> None:
    lease, settle = times
    from agentkeep.persistence.opening import open_store

    # The tables and the ownership table exist before the workers: the fence log sees all.
    open_store(base / "creator", database=url).close()
    install_fence_log(url)
    pool = Pool(base, url, lease, mutant)
    try:
        if wait_until(pool.covered, SETTLE_SECONDS) is None:
            result.problems.append("the workers never split the partitions")
            return
        sessions = _setup(pool)
        sent = Sent()
        done = threading.Event()
        clients = [
            threading.Thread(
                target=send_keyed, args=(pool, seed, n, sessions, sent, done), daemon=True
            )
            for n in range(CLIENTS)
        ]
        for thread in clients:
            thread.start()
        for fault in plan(seed, lease):
            result.faults.append(_inject(pool, fault))
        done.set()
        for thread in clients:
            thread.join(SEND_SECONDS * MESSAGES)
        result.accepted, result.retries = len(sent.accepted), sent.retries
        result.unavailable = sent.unavailable
        result.reasons = dict(sent.reasons)
        result.problems += sent.problems
        if wait_until(lambda: pool.covered() and not live_turns(url), settle) is None:
            result.problems.append("the cluster never settled: partitions or live turns left")
        result.problems += judge_run(url, sent.accepted)
        writes, epochs = fence_log(url)
        result.writes, result.epochs = len(writes), len(epochs)
        result.problems += judge_fence_log(writes, epochs)
    finally:
        pool.close()


def _setup(pool: Pool) -> list[str]:
    url = pool.url_of(0)

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        deadline = time.monotonic() + SETTLE_SECONDS
        while True:
            answer = httpx.post(f"{url}{path}", json=body, headers=HEADERS, timeout=30)
            if answer.status_code != 503 or time.monotonic() > deadline:
                break
            time.sleep(0.05)  # between owners: asked again as a client does
        if answer.status_code != 201:
            raise RuntimeError(f"{path}: {answer.status_code} {answer.text}")
        found: dict[str, Any] = answer.json()
        return found

    post("/v1/agents", {"id": "helper"})
    return [str(post("/v1/sessions", {"agentId": "helper"})["id"]) for _ in range(SESSIONS)]


def _inject(pool: Pool, fault: Fault) -> FaultRecord:
    record = FaultRecord(fault)
    time.sleep(fault.delay)  # the seed's moment in the clients' run
    worker = pool.workers[fault.slot]
    hit = time.monotonic()
    if fault.kind == "kill":
        worker.process.kill()
        worker.process.wait()
        record.takeover = wait_until(lambda: pool.covered(without=fault.slot), SETTLE_SECONDS)
        pool.restart(fault.slot)
    else:
        worker.process.send_signal(signal.SIGSTOP)
        with pool.lock:
            pool.stopped.add(fault.slot)
        # Taken over while stopped (its lease runs out, its peers reap it); stopped on until
        # the seed's duration is up, so it resumes as a reaped worker.
        record.takeover = wait_until(lambda: pool.covered(without=fault.slot), SETTLE_SECONDS)
        wait_until(lambda: time.monotonic() - hit >= fault.stopped, fault.stopped + 1)
        worker.process.send_signal(signal.SIGCONT)
        with pool.lock:
            pool.stopped.discard(fault.slot)
        if record.takeover is not None and record.takeover > fault.stopped:
            record.note = "taken over only after the stop"
        if wait_until(lambda: worker.partitions() is not None, 30) is None:
            record.note = f"did not answer after SIGCONT (exit {worker.process.poll()})"
            if worker.process.poll() is None:
                worker.process.kill()
                worker.process.wait()
            pool.restart(fault.slot)
    wait_until(pool.covered, SETTLE_SECONDS)
    return record


# -- the sweep ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """``python -m agentkeep.chaos.worker_failover [--seeds N] [--start S] [--database URL]
    [--mutant M]`` (without ``--seeds``: ``CHAOS_SEED``/``CHAOS_SEEDS``, else
    :data:`DEFAULT_SEEDS`); exit status 1 if a seed failed."""
    parser = argparse.ArgumentParser(prog="python -m agentkeep.chaos.worker_failover")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--database", default=None)
    parser.add_argument("--mutant", default=None)
    args = parser.parse_args(argv)
    seeds = (
        list(range(args.start, args.start + args.seeds))
        if args.seeds is not None
        else seeds_from_env(DEFAULT_SEEDS)
    )
    cluster = None if (args.database or chaos_database()) else OwnCluster()
    failed: list[int] = []
    takeovers: dict[str, list[float]] = {"kill": [], "stop": []}
    reasons: Counter[str] = Counter()
    started = time.monotonic()
    try:
        for seed in seeds:
            result = run_campaign(seed, database=args.database, mutant=args.mutant, cluster=cluster)
            print(result.describe(), flush=True)
            reasons.update(result.reasons)
            for record in result.faults:
                if record.takeover is not None:
                    takeovers[record.fault.kind].append(record.takeover)
            if not result.ok:
                failed.append(seed)
    finally:
        if cluster is not None:
            cluster.close()
    wall = time.monotonic() - started
    print(f"seeds {len(seeds)}  failed {len(failed)} {failed}  wall {wall:.1f} s")
    for kind, times in takeovers.items():
        if times:
            print(f"  takeover after {kind}: min {min(times):.2f} s, max {max(times):.2f} s")
    for reason, count in sorted(reasons.items()):
        print(f"  sends asked again after {reason}: {count}")
    return 1 if failed else 0


__all__ = [
    "DEFAULT_SEEDS",
    "KEEP_WRITING_AFTER_LOST",
    "FailoverResult",
    "Fault",
    "plan",
    "run_campaign",
]

if __name__ == "__main__":
    sys.exit(main())
