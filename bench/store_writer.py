"""Group commit versus one commit per transaction, with ``synchronous=FULL``.

Each logical transaction is a small realistic write: append a conversation record and write
the owed-work fact. Measured with 1, 8 and 64 submitter threads:

- ``writer``: through the StoreWriter actor (group commit), ``Store.transact``;
- ``one-commit``: a plain apsw connection doing BEGIN IMMEDIATE / the same statements /
  COMMIT per transaction, shared by the submitters under a lock (SQLite allows one writer).

Run: ``.venv/bin/python bench/store_writer.py [--seconds 2] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import apsw
import msgspec
import structlog

from agentkeep.persistence import Store, Transaction
from agentkeep.types import TextBlock, UserMessage
from agentkeep.types.records import AgentRow, OwedWork, UserRecord

SUBMITTERS = (1, 8, 64)
AGENTS = 64

_RECORD = UserRecord(
    message_id="m",
    message=UserMessage(content=(TextBlock(text="What is the weather like in Lisbon today?"),)),
)


def _agent(index: int) -> str:
    return f"agent{index}"


def _run(submitters: int, seconds: float, transact: Callable[[int, int], None]) -> list[float]:
    """Run ``transact(submitter, n)`` in a loop on each thread; returns latencies (s)."""
    latencies: list[list[float]] = [[] for _ in range(submitters)]
    start = threading.Barrier(submitters + 1)
    stop = threading.Event()

    def submitter(index: int) -> None:
        start.wait()
        mine = latencies[index]
        n = 0
        while not stop.is_set():
            began = time.perf_counter()
            transact(index, n)
            mine.append(time.perf_counter() - began)
            n += 1

    threads = [threading.Thread(target=submitter, args=(i,)) for i in range(submitters)]
    for thread in threads:
        thread.start()
    start.wait()
    stop.wait(seconds)  # the measurement window, not thread ordering
    stop.set()
    for thread in threads:
        thread.join()
    return [value for values in latencies for value in values]


def _report(label: str, submitters: int, seconds: float, latencies: list[float]) -> float:
    rate = len(latencies) / seconds
    ordered = sorted(latencies)
    p50 = statistics.median(ordered) * 1000
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000
    print(
        f"  {label:<10} submitters={submitters:>2}  {rate:>9,.0f} tx/s  "
        f"p50={p50:6.2f} ms  p99={p99:6.2f} ms  (n={len(latencies)})"
    )
    return rate


def bench_writer(directory: Path, submitters: int, seconds: float) -> tuple[float, Store]:
    store = Store.open(directory)
    store.transact(
        lambda tx: [tx.agents.create(AgentRow(id=_agent(i), config={})) for i in range(AGENTS)]
    )

    def transact(index: int, n: int) -> None:
        agent = _agent(index % AGENTS)
        owed = OwedWork(stage="inference", turn_id=f"t{n}")

        def work(tx: Transaction) -> None:
            tx.records.append(agent, _RECORD)
            tx.facts.write_owed(agent, owed)

        store.transact(work)

    latencies = _run(submitters, seconds, transact)
    return _report("writer", submitters, seconds, latencies), store


def bench_one_commit(directory: Path, submitters: int, seconds: float) -> float:
    directory.mkdir(parents=True, exist_ok=True)
    connection = apsw.Connection(str(directory / "plain.db"))
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("PRAGMA synchronous = FULL")
    connection.execute("PRAGMA foreign_keys = ON")
    connection.execute(
        "CREATE TABLE IF NOT EXISTS records (agent_id TEXT, position INTEGER, record_json TEXT,"
        " PRIMARY KEY (agent_id, position));"
        "CREATE TABLE IF NOT EXISTS owed_work (agent_id TEXT PRIMARY KEY, owed_json TEXT);"
    )
    encode = msgspec.json.Encoder(order="sorted").encode
    record_json = encode(_RECORD).decode()
    lock = threading.Lock()

    def transact(index: int, n: int) -> None:
        agent = _agent(index % AGENTS)
        owed_json = encode(OwedWork(stage="inference", turn_id=f"t{n}")).decode()
        with lock:
            connection.execute("BEGIN IMMEDIATE")
            (position,) = connection.execute(
                "SELECT coalesce(max(position), 0) + 1 FROM records WHERE agent_id = ?", (agent,)
            ).fetchall()[0]
            connection.execute(
                "INSERT INTO records (agent_id, position, record_json) VALUES (?, ?, ?)",
                (agent, position, record_json),
            )
            connection.execute(
                "INSERT INTO owed_work (agent_id, owed_json) VALUES (?, ?) ON CONFLICT (agent_id)"
                " DO UPDATE SET owed_json = excluded.owed_json"
                " WHERE owed_json IS NOT excluded.owed_json",
                (agent, owed_json),
            )
            connection.execute("COMMIT")

    latencies = _run(submitters, seconds, transact)
    connection.close()
    return _report("one-commit", submitters, seconds, latencies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="measurement window per run")
    parser.add_argument(
        "--repeat", type=int, default=3, help="alternating runs per configuration (median)"
    )
    args = parser.parse_args()
    # A bench is an entry point, like the CLI: it may configure logging (quiet, here).
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    print(
        f"store_writer bench: synchronous=FULL, WAL, {args.seconds:g} s per run, "
        f"{args.repeat} alternating runs each, SQLite {apsw.sqlite_lib_version()}"
    )
    ratios: list[tuple[int, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="agentkeep-bench-") as scratch:
        for submitters in SUBMITTERS:
            plain_rates: list[float] = []
            grouped_rates: list[float] = []
            # Alternate the two so drifting machine load hits both alike.
            for run in range(args.repeat):
                base = Path(scratch) / f"s{submitters}r{run}"
                plain_rates.append(bench_one_commit(base / "plain", submitters, args.seconds))
                grouped, store = bench_writer(base / "writer", submitters, args.seconds)
                grouped_rates.append(grouped)
                stats = store.statistics()
                store.close()
                print(
                    f"  {'':<10} groups={stats.groups} commits={stats.commits} "
                    f"transactions={stats.transactions} max_group_size={stats.max_group_size} "
                    f"checkpoints={stats.checkpoints}"
                )
            ratios.append(
                (submitters, statistics.median(grouped_rates), statistics.median(plain_rates))
            )
    print("median tx/s and ratio (writer / one-commit):")
    for submitters, grouped, plain in ratios:
        print(
            f"  submitters={submitters:>2}: writer {grouped:>9,.0f}  one-commit {plain:>9,.0f}  "
            f"ratio {grouped / plain:5.2f}x"
        )


if __name__ == "__main__":
    main()
