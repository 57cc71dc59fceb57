"""Failover and fencing campaign: real ``agentkeep serve --partitions`` workers killed and stopped.

Each seed starts three workers (``agentkeep serve --database URL --partitions 6 --lease 2``)
on a fresh schema, creates a definition and sessions, and runs three clients that send
messages with idempotency keys over REST to random workers, again with the same key after
any error, timeout or 503 (``partition_unavailable``). Meanwhile the seed's schedule, in a
seeded order, SIGKILLs a worker (then starts a new one in its place) and SIGSTOPs a worker
past its lease (its peers reap it and take its partitions), then SIGCONTs it. The time from
each fault until the other workers run every partition is the *takeover* time.

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
import json
import os
import random
import selectors
import signal
import subprocess
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
from agentkeep.chaos.pg_server import OwnCluster, admin
from agentkeep.chaos.worker_fence import fence_log, install_fence_log, judge_fence_log

FaultKind = Literal["kill", "stop"]
WORKERS = 3
PARTITIONS = 6
LEASE = 2.0
SESSIONS = 6
CLIENTS = 3
MESSAGES = 8  # per client
TOKEN = "failover-chaos-token-0123456789"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
REQUEST_TIMEOUT = 5.0
SETTLE_SECONDS = 120.0
SEND_SECONDS = 120.0
KEEP_WRITING_AFTER_LOST = "keep_writing_after_lost"
PROVIDERS = """
[providers.slow]
kind = "gym"
class = "responding"
latency_seconds = 0.05

[defaults]
provider = "slow"
"""


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
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """True if every check held."""
        return not self.problems

    def describe(self) -> str:
        """The verdict, the faults with their takeover times, the problems, the replay."""
        head = f"worker_failover seed {self.seed}" + (
            f" (mutant {self.mutant})" if self.mutant else ""
        )
        lines = [f"{head}: {'ok' if self.ok else 'FAILED'} in {self.seconds:.1f} s"]
        for record in self.faults:
            took = "never" if record.takeover is None else f"{record.takeover:.2f} s"
            note = f" ({record.note})" if record.note else ""
            lines.append(f"  {record.fault.describe()}: takeover {took}{note}")
        lines.append(
            f"  {self.accepted} keys accepted, {self.retries} retries "
            f"({self.unavailable} x 503), {self.writes} event writes, {self.epochs} owner stamps"
        )
        lines += [f"  ! {problem}" for problem in self.problems]
        lines.append(
            f"  replay: python -m agentkeep.chaos.worker_failover --seeds 1 --start {self.seed}"
        )
        return "\n".join(lines)


# -- workers -----------------------------------------------------------------------------------


class Worker:
    """One ``agentkeep serve --partitions`` child process."""

    def __init__(
        self, home: Path, url: str, *, lease: float, mutant: str | None, generation: int
    ) -> None:
        home.mkdir(parents=True, exist_ok=True)
        (home / "providers.toml").write_text(PROVIDERS)
        self.log = home.parent / f"{home.name}-{generation}.log"
        self._log = self.log.open("w")
        env = {**os.environ, "AGENTKEEP_DAEMON_TOKEN": TOKEN}
        self.process = subprocess.Popen(
            [
                *_command(mutant),
                *("--home", str(home), "--json", "--log-level", "info", "serve"),
                *("--port", "0", "--database", url, "--partitions", str(PARTITIONS)),
                *("--lease", str(lease)),
            ],
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=env,
        )
        self.url = str(json.loads(_first_line(self.process))["url"])

    def partitions(self) -> set[int] | None:
        """The partitions it runs by its health, None if it does not answer."""
        try:
            health = httpx.get(f"{self.url}/healthz", headers=HEADERS, timeout=1.0).json()
        except (httpx.HTTPError, ValueError):
            return None
        return {int(p) for p in health.get("coordinator", {}).get("partitions", {})}

    def close(self) -> None:
        """SIGCONT (if stopped), SIGTERM, wait; SIGKILL if it does not leave."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        assert self.process.stdout is not None
        self.process.stdout.close()
        self._log.close()


def _command(mutant: str | None) -> tuple[str, ...]:
    """The command line of a worker: ``python -m agentkeep.cli``, or with the mutant
    installed first (tests only)."""
    if mutant is None:
        return (sys.executable, "-m", "agentkeep.cli")
    if mutant != KEEP_WRITING_AFTER_LOST:
        raise ValueError(f"unknown mutant {mutant!r}")
    return (sys.executable, "-c", _MUTANT_SERVE)


#: A worker with the mutant: a partition's writer whose session was cut reconnects without
#: taking its locks again or checking the ownership row, so it writes on after it lost them.
_MUTANT_SERVE = (
    "import sys\n"
    "from agentkeep.chaos._mutants.ownership import install_reconnect_without_lock_mutant\n"
    "install_reconnect_without_lock_mutant()\n"
    "from agentkeep.cli import cli\n"
    "sys.argv[0] = 'agentkeep'\n"
    "cli()\n"
)


def _first_line(process: subprocess.Popen[str], timeout: float = 60.0) -> str:
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    try:
        if not selector.select(timeout):
            raise RuntimeError("a worker printed no listening line")
        return process.stdout.readline()
    finally:
        selector.close()


class Pool:
    """The worker slots; a killed worker's slot gets a new process."""

    def __init__(self, base: Path, url: str, lease: float, mutant: str | None) -> None:
        self.base, self.url, self.lease, self.mutant = base, url, lease, mutant
        self.lock = threading.Lock()
        self.generations = [1] * WORKERS
        self.workers = [self._start(slot) for slot in range(WORKERS)]
        self.stopped: set[int] = set()
        self.retired: list[Worker] = []

    def _start(self, slot: int) -> Worker:
        return Worker(
            self.base / f"w{slot}",
            self.url,
            lease=self.lease,
            mutant=self.mutant,
            generation=self.generations[slot],
        )

    def restart(self, slot: int) -> None:
        """A new process in ``slot`` (the old one must have ended)."""
        with self.lock:
            self.retired.append(self.workers[slot])
            self.generations[slot] += 1
        worker = self._start(slot)
        with self.lock:
            self.workers[slot] = worker

    def url_of(self, slot: int) -> str:
        with self.lock:
            return self.workers[slot].url

    def covered(self, without: int | None = None) -> bool:
        """Every partition run by exactly one worker (``without`` left out and not asked)."""
        owned: list[int] = []
        for slot, worker in enumerate(list(self.workers)):
            if slot == without or slot in self.stopped:
                continue
            found = worker.partitions()
            if found is None:
                return False
            owned += found
        return sorted(owned) == list(range(PARTITIONS))

    def close(self) -> None:
        for worker in [*self.workers, *self.retired]:
            worker.close()


def _wait(condition: Any, timeout: float) -> float | None:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            return None
        time.sleep(0.05)  # polling other processes' health over sockets
    return time.monotonic() - started


# -- clients -----------------------------------------------------------------------------------


@dataclass
class Sent:
    """What the clients saw."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    accepted: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> session, turn
    retries: int = 0
    unavailable: int = 0
    problems: list[str] = field(default_factory=list)


def _client(pool: Pool, seed: int, number: int, sessions: list[str], sent: Sent) -> None:
    rng = random.Random(seed * 1000 + number)
    for message in range(MESSAGES):
        session = rng.choice(sessions)
        key = f"s{seed}-c{number}-m{message}"
        body = {"message": f"hello {key}", "idempotencyKey": key, "wait": False}
        deadline = time.monotonic() + SEND_SECONDS
        while True:
            url = pool.url_of(rng.randrange(WORKERS))
            try:
                answer = httpx.post(
                    f"{url}/v1/sessions/{session}/messages",
                    json=body,
                    headers=HEADERS,
                    timeout=REQUEST_TIMEOUT,
                )
            except httpx.HTTPError:
                answer = None
            if answer is not None and answer.status_code in (200, 202):
                turn = str(answer.json()["turn"]["id"])
                with sent.lock:
                    first = sent.accepted.setdefault(key, (session, turn))
                    if first[1] != turn:
                        sent.problems.append(f"K1: key {key} answered turn {turn}, then {first}")
                # Once more with the same key through another worker: the same turn.
                if rng.random() < 0.3:
                    continue
                break
            with sent.lock:
                sent.retries += 1
                if answer is not None and answer.status_code == 503:
                    sent.unavailable += 1
            if time.monotonic() > deadline:
                with sent.lock:
                    what = "no answer" if answer is None else f"{answer.status_code} {answer.text}"
                    sent.problems.append(f"key {key} never accepted: {what}")
                break
            time.sleep(0.05)  # a client's back-off before it asks again
        time.sleep(rng.uniform(0.0, 0.4))  # the seed's pace of sends


# -- one seed ----------------------------------------------------------------------------------


def run_campaign(
    seed: int,
    *,
    database: str | None = None,
    mutant: str | None = None,
    lease: float = LEASE,
    cluster: OwnCluster | None = None,
) -> FailoverResult:
    """Play one seed (see the module) on ``database`` or ``CHAOS_DATABASE``, else on a
    throwaway cluster (``cluster`` may share one across seeds)."""
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
            _play(seed, url, Path(scratch), mutant, lease, result)
    finally:
        if own is not None and cluster is None:
            own.close()
    result.seconds = time.monotonic() - started
    return result


def _play(
    seed: int, url: str, base: Path, mutant: str | None, lease: float, result: FailoverResult
) -> None:
    from agentkeep.persistence.opening import open_store

    # The tables and the ownership table exist before the workers: the fence log sees all.
    open_store(base / "creator", database=url).close()
    install_fence_log(url)
    pool = Pool(base, url, lease, mutant)
    try:
        if _wait(pool.covered, SETTLE_SECONDS) is None:
            result.problems.append("the workers never split the partitions")
            return
        sessions = _setup(pool)
        sent = Sent()
        clients = [
            threading.Thread(target=_client, args=(pool, seed, n, sessions, sent), daemon=True)
            for n in range(CLIENTS)
        ]
        for thread in clients:
            thread.start()
        for fault in plan(seed, lease):
            result.faults.append(_inject(pool, fault))
        for thread in clients:
            thread.join(SEND_SECONDS * MESSAGES)
        result.accepted, result.retries = len(sent.accepted), sent.retries
        result.unavailable = sent.unavailable
        result.problems += sent.problems
        if _wait(lambda: pool.covered() and not _live_turns(url), SETTLE_SECONDS) is None:
            result.problems.append("the cluster never settled: partitions or live turns left")
        result.problems += _judge(url, sent.accepted)
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
        record.takeover = _wait(lambda: pool.covered(without=fault.slot), SETTLE_SECONDS)
        pool.restart(fault.slot)
    else:
        worker.process.send_signal(signal.SIGSTOP)
        with pool.lock:
            pool.stopped.add(fault.slot)
        _wait(lambda: time.monotonic() - hit >= fault.stopped, fault.stopped + 1)
        record.takeover = _wait(lambda: pool.covered(without=fault.slot), SETTLE_SECONDS)
        worker.process.send_signal(signal.SIGCONT)
        with pool.lock:
            pool.stopped.discard(fault.slot)
        if record.takeover is not None:
            record.takeover += fault.stopped
        if _wait(lambda: worker.partitions() is not None, 30) is None:
            record.note = f"did not answer after SIGCONT (exit {worker.process.poll()})"
            if worker.process.poll() is None:
                worker.process.kill()
                worker.process.wait()
            pool.restart(fault.slot)
    if record.takeover is not None and fault.kind == "stop":
        record.takeover = round(record.takeover, 3)
    _wait(pool.covered, SETTLE_SECONDS)
    return record


# -- the checks ----------------------------------------------------------------------------------


def _query(url: str, text: str, *args: Any) -> list[tuple[Any, ...]]:
    from psycopg import sql

    schema = dict(p.split("=", 1) for p in url.split("?", 1)[1].split("&"))["schema"]
    with admin(url) as session:
        session.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
        return list(session.execute(text, args).fetchall())


def _live_turns(url: str) -> int:
    rows = _query(
        url, "SELECT count(*) FROM turns WHERE status IN ('queued', 'running', 'cancelling')"
    )
    return int(rows[0][0])


def _judge(url: str, accepted: dict[str, tuple[str, str]]) -> list[str]:
    problems: list[str] = []
    turns: dict[tuple[str, str], list[tuple[str, str, str | None]]] = {}
    for agent, key, turn, status, message in _query(
        url, "SELECT agent_id, idempotency_key, id, status, message_id FROM turns"
    ):
        turns.setdefault((agent, key), []).append((turn, status, message))
    events: dict[str, list[tuple[int, str, str]]] = {}
    for agent, sequence, kind, data in _query(
        url, "SELECT agent_id, sequence, type, data_json FROM session_events ORDER BY sequence"
    ):
        events.setdefault(agent, []).append((int(sequence), str(kind), str(data)))
    for key, (session, turn) in sorted(accepted.items()):
        found = turns.get((session, key), [])
        if [t[0] for t in found] != [turn]:
            problems.append(f"K1: key {key} of {session}: turns {found}, answered {turn}")
        elif found[0][1] != "completed":
            problems.append(f"K1: key {key}'s turn {turn} ended {found[0][1]}")
    for agent, rows in sorted(events.items()):
        if [s for s, _, _ in rows] != list(range(1, len(rows) + 1)):
            problems.append(f"L1: {agent}'s ledger is not dense: {[s for s, _, _ in rows]}")
        problems += _answered(agent, rows, turns)
    live = _live_turns(url)
    if live:
        problems.append(f"T1: {live} turns left live")
    return problems


def _answered(
    agent: str,
    rows: list[tuple[int, str, str]],
    turns: dict[tuple[str, str], list[tuple[str, str, str | None]]],
) -> list[str]:
    """``K2``: each accepted message accepted once, and its turn ended exactly once, with an
    answer (one ``turn.completed`` carrying the reply, no other end)."""
    problems: list[str] = []
    accepted: Counter[str] = Counter()
    turn_of: dict[str, str] = {}
    ends: Counter[str] = Counter()
    for _, kind, data in rows:
        fields = json.loads(data)
        if kind == "message.accepted":
            accepted[str(fields.get("message_id"))] += 1
            turn_of[str(fields.get("message_id"))] = str(fields.get("turn_id"))
        elif kind in ("turn.completed", "turn.failed", "turn.cancelled", "turn.interrupted"):
            ends[str(fields.get("turn_id"))] += 1
            if kind == "turn.completed" and not (fields.get("result") or {}).get("message"):
                problems.append(f"K2: {agent}'s turn {fields.get('turn_id')} has no answer")
    for message, times in accepted.items():
        if times != 1:
            problems.append(f"K2: {agent}'s message {message} accepted {times} times")
        if ends[turn_of[message]] != 1:
            problems.append(
                f"K2: {agent}'s message {message} (turn {turn_of[message]}) answered "
                f"{ends[turn_of[message]]} times"
            )
    messages = {m for (a, _), found in turns.items() if a == agent for _, _, m in found if m}
    if messages - set(accepted):
        problems.append(f"K2: {agent}'s turns' messages without acceptance: {messages}")
    return problems


# -- the sweep ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """``python -m agentkeep.chaos.worker_failover [--seeds N] [--start S] [--database URL]
    [--mutant M]``; exit status 1 if a seed failed."""
    parser = argparse.ArgumentParser(prog="python -m agentkeep.chaos.worker_failover")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--database", default=None)
    parser.add_argument("--mutant", default=None)
    args = parser.parse_args(argv)
    cluster = None if (args.database or chaos_database()) else OwnCluster()
    failed: list[int] = []
    takeovers: dict[str, list[float]] = {"kill": [], "stop": []}
    started = time.monotonic()
    try:
        for seed in range(args.start, args.start + args.seeds):
            result = run_campaign(seed, database=args.database, mutant=args.mutant, cluster=cluster)
            print(result.describe(), flush=True)
            for record in result.faults:
                if record.takeover is not None:
                    takeovers[record.fault.kind].append(record.takeover)
            if not result.ok:
                failed.append(seed)
    finally:
        if cluster is not None:
            cluster.close()
    wall = time.monotonic() - started
    print(f"seeds {args.seeds}  failed {len(failed)} {failed}  wall {wall:.1f} s")
    for kind, times in takeovers.items():
        if times:
            print(f"  takeover after {kind}: min {min(times):.2f} s, max {max(times):.2f} s")
    return 1 if failed else 0


__all__ = [
    "KEEP_WRITING_AFTER_LOST",
    "FailoverResult",
    "Fault",
    "plan",
    "run_campaign",
]

if __name__ == "__main__":
    sys.exit(main())
