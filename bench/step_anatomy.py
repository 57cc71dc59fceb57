"""Where a durable step's CPU goes: a diagnostic for issue 17's goal 3 (CPU per step).

``bench/agent_step.py`` says how fast a step is; this says what it is made of, measured in
one run next to its baselines:

- **CPU by thread role** (``/proc/self/task/<tid>/schedstat``: nanoseconds on a CPU, user and
  system together): the callers (``send`` + ``wait_for_idle``), the store writer, the agent
  actors, the inference workers, the rest — at 1 agent and at 64 agents;
- **the GIL bound**: at 64 agents, ``steps/s × process CPU per step`` is the number of cores
  busy. CPython runs Python on one core at a time, so when it is ≈ 1 the throughput is
  ``1 / CPU per step`` and only less CPU per step raises it;
- **statements**: the writer's CPU inside SQLite per statement kind (thread CPU around each
  ``apsw`` call), per step, at 1 agent (at 64 agents the same timing also counts the CPU
  of taking the GIL back after each call, so it is not shown);
- **pages**: the WAL frames (B-tree pages) each of a step's two transactions writes, by table
  or index (``dbstat``), at 1 agent;
- **baselines**: a raw apsw transaction writing one row (CPU per commit) and one writing one
  row into each of as many tables as agentkeep's acceptance touches; a thread hand-off
  (``SimpleQueue`` round trip between two threads, CPU per hand-off).

Run: ``PYTHONPATH=src .venv/bin/python bench/step_anatomy.py [--steps 400] [--agents 64]``.
Linux only (``/proc``). It hooks one internal method (``Statements.execute``) from the outside
to time statements; the figures are diagnostic, not goals.
"""

from __future__ import annotations

import argparse
import collections
import os
import queue
import re
import shutil
import statistics
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import apsw

import agentkeep as ak
from agentkeep.persistence import codec
from agentkeep.providers import script

# -- per-thread CPU ----------------------------------------------------------------------------


def _thread_cpu_ns(native_id: int | None) -> int:
    """Nanoseconds the thread ran on a CPU (0 if it is gone)."""
    try:
        with open(f"/proc/self/task/{native_id}/schedstat") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError):
        return 0


def _role(name: str) -> str:
    for prefix, role in (
        ("StoreWriter", "store writer"),
        ("AgentActor", "agent actors"),
        ("agentkeep-inference", "inference workers"),
        ("agentkeep-checkpointer", "checkpointer"),
        ("caller", "callers (send + wait_for_idle)"),
    ):
        if name.startswith(prefix):
            return role
    return "other threads"


class _ThreadCpu:
    """CPU per role between :meth:`start` and :meth:`stop` (threads alive at either end)."""

    def __init__(self) -> None:
        self._start: dict[int, tuple[str, int]] = {}
        self.by_role: collections.Counter[str] = collections.Counter()

    @staticmethod
    def _snapshot() -> dict[int, tuple[str, int]]:
        return {
            t.native_id: (_role(t.name), _thread_cpu_ns(t.native_id))
            for t in threading.enumerate()
            if t.native_id is not None
        }

    def start(self) -> None:
        self._start = self._snapshot()

    def stop(self) -> None:
        for tid, (role, ns) in self._snapshot().items():
            self.by_role[role] += ns - self._start.get(tid, (role, 0))[1]


# -- agentkeep steps ---------------------------------------------------------------------------


def _steps(home: Path, agents: int, steps: int, cpu: _ThreadCpu) -> tuple[float, float]:
    """Run ``steps`` steps on each of ``agents`` agents, one caller thread each (kept alive
    until measured); returns (wall seconds, process CPU seconds) of the timed steps."""
    model = ak.ScriptedModel([script.text("ok") for _ in range(agents * (steps + 1))], record=False)
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    with ak.AgentSystem.open(home, providers=providers, provider="local", model="gym-1") as system:
        handles = [system.create() for _ in range(agents)]
        for agent in handles:  # warm up, untimed
            agent.send(ak.user("warm up"))
            agent.wait_for_idle(timeout_seconds=30)
        ready, done, release = (threading.Barrier(agents + 1) for _ in range(3))

        def caller(index: int) -> None:
            agent = handles[index]
            ready.wait()
            for n in range(steps):
                agent.send(ak.user(f"step {n}"))
                agent.wait_for_idle(timeout_seconds=30)
            done.wait()
            release.wait()  # alive until its CPU was read

        threads = [
            threading.Thread(target=caller, args=(i,), name=f"caller-{i}") for i in range(agents)
        ]
        for thread in threads:
            thread.start()
        cpu.start()
        wall, process = time.perf_counter(), time.process_time()
        ready.wait()
        done.wait()
        wall, process = time.perf_counter() - wall, time.process_time() - process
        cpu.stop()
        release.wait()
        for thread in threads:
            thread.join()
    return wall, process


# -- statements --------------------------------------------------------------------------------


@contextmanager
def _timed_statements(totals: collections.Counter[str]) -> Iterator[None]:
    """Add the writer's thread CPU inside each apsw statement to ``totals`` (by its first
    words), while the block runs."""
    original = codec.Statements.execute

    class _TimedCursor:
        def __init__(self, cursor: apsw.Cursor) -> None:
            self._cursor = cursor

        def execute(self, sql: str, params: tuple[Any, ...] = ()) -> apsw.Cursor:
            started = time.thread_time_ns()
            result = self._cursor.execute(sql, params)
            totals[_statement_kind(sql)] += time.thread_time_ns() - started
            return result

    def execute(self: Any, sql: str, params: tuple[Any, ...] = ()) -> apsw.Cursor:
        cursor = self._cursor
        self._cursor = _TimedCursor(cursor)
        try:
            return original(self, sql, params)
        finally:
            self._cursor = cursor

    codec.Statements.execute = execute  # type: ignore[method-assign]
    try:
        yield
    finally:
        codec.Statements.execute = original  # type: ignore[method-assign]


def _statement_kind(sql: str) -> str:
    words = re.sub(r"\s+", " ", sql).split(" ")
    if words[0] in ("INSERT", "DELETE") or words[:2] == ["INSERT", "OR"]:
        table = words[words.index("INTO") + 1] if "INTO" in words else words[2]
        return f"{' '.join(words[: words.index(table)])} {table}"
    if words[0] == "UPDATE":
        return f"UPDATE {words[1]}"
    if words[0] == "SELECT":
        return "SELECT …"
    return " ".join(words[:2])


def _statement_cpu(home: Path, agents: int, steps: int) -> collections.Counter[str]:
    """Writer CPU inside each kind of statement (ns, summed) over ``steps`` steps of each of
    ``agents`` agents."""
    totals: collections.Counter[str] = collections.Counter()
    home.mkdir()
    with _timed_statements(totals):
        _steps(home, agents, steps, _ThreadCpu())
    return totals


# -- pages -------------------------------------------------------------------------------------


def _wal_transactions(wal: bytes) -> tuple[int, list[list[int]]]:
    """The page size and, per committed transaction in the WAL, the pages it wrote."""
    page_size = struct.unpack(">I", wal[8:12])[0]
    transactions: list[list[int]] = []
    current: list[int] = []
    offset = 32
    while offset + 24 <= len(wal):
        page, commit_size = struct.unpack(">II", wal[offset : offset + 8])
        current.append(page)
        if commit_size:
            transactions.append(current)
            current = []
        offset += 24 + page_size
    return page_size, transactions


def _step_pages(home: Path) -> list[collections.Counter[str]]:
    """The pages of one step's transactions (after warm-up steps), by table or index."""
    model = ak.ScriptedModel([script.text("ok") for _ in range(20)], record=False)
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    with ak.AgentSystem.open(home, providers=providers, provider="local", model="gym-1") as system:
        agent = system.create()
        for n in range(8):
            agent.send(ak.user(f"warm up {n}"))
            agent.wait_for_idle(timeout_seconds=30)
        wal_path = next(home.rglob("*-wal"))
        database = Path(str(wal_path).removesuffix("-wal"))
        before = wal_path.read_bytes()
        agent.send(ak.user("measured"))
        agent.wait_for_idle(timeout_seconds=30)
        after = wal_path.read_bytes()
        copy = home / "anatomy-copy.db"
        shutil.copy(database, copy)
        shutil.copy(wal_path, f"{copy}-wal")
    if len(after) < len(before) or after[:32] != before[:32]:
        return []  # the WAL restarted under the step: no clean reading this time
    _, old = _wal_transactions(before)
    _, transactions = _wal_transactions(after)
    owner = {
        page: name
        for name, page in apsw.Connection(str(copy)).execute("SELECT name, pageno FROM dbstat")
    }
    return [
        collections.Counter(owner.get(page, "(freed)") for page in tx)
        for tx in transactions[len(old) :]
    ]


# -- baselines ---------------------------------------------------------------------------------


def _raw_commit_cpu(home: Path, tables: int, commits: int = 400) -> float:
    """Median thread CPU µs of one raw apsw transaction writing a row into each of
    ``tables`` tables (WAL, synchronous=FULL, 2 KB pages like agentkeep's store)."""
    connection = apsw.Connection(str(home / f"raw-{tables}.db"))
    connection.execute("PRAGMA page_size = 2048")
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("PRAGMA synchronous = FULL")
    for k in range(tables):
        connection.execute(f"CREATE TABLE t{k} (id INTEGER PRIMARY KEY, body TEXT)")
    samples = []
    for _ in range(commits):
        started = time.thread_time_ns()
        connection.execute("BEGIN IMMEDIATE")
        for k in range(tables):
            connection.execute(f"INSERT INTO t{k} (body) VALUES (?)", ("x" * 60,))
        connection.execute("COMMIT")
        samples.append(time.thread_time_ns() - started)
    connection.close()
    return statistics.median(samples) / 1e3


def _hand_off_cpu(round_trips: int = 20000) -> float:
    """Process CPU µs of one hand-off between two threads (half a SimpleQueue round trip)."""
    there: queue.SimpleQueue[int] = queue.SimpleQueue()
    back: queue.SimpleQueue[int] = queue.SimpleQueue()

    def echo() -> None:
        for _ in range(round_trips):
            back.put(there.get())

    thread = threading.Thread(target=echo)
    thread.start()
    started = time.process_time()
    for n in range(round_trips):
        there.put(n)
        back.get()
    used = time.process_time() - started
    thread.join()
    return used / round_trips / 2 * 1e6


# -- report ------------------------------------------------------------------------------------


def _print_roles(title: str, cpu: _ThreadCpu, steps: int, process_cpu: float) -> None:
    print(f"\n{title}: CPU µs per step by thread (process CPU {process_cpu / steps * 1e6:.0f})")
    for role, ns in cpu.by_role.most_common():
        print(f"  {role:<34} {ns / steps / 1e3:7.0f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=400, help="steps at 1 agent")
    parser.add_argument("--agents", type=int, default=64)
    parser.add_argument("--agent-steps", type=int, default=30, help="steps per agent, many")
    args = parser.parse_args(argv)
    if not sys.platform.startswith("linux"):
        print("step_anatomy needs Linux (/proc)")
        return 2
    print(f"step anatomy; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        handoff = _hand_off_cpu()
        print(
            f"\nbaselines: a thread hand-off {handoff:.1f} µs CPU; a raw apsw transaction "
            f"(CPU µs, median)"
        )
        for tables in (1, 8, 17):
            print(
                f"  one row into each of {tables:>2} tables  {_raw_commit_cpu(root, tables):7.0f}"
            )

        one = _ThreadCpu()
        (root / "one").mkdir()
        wall, process = _steps(root / "one", 1, args.steps, one)
        _print_roles(f"1 agent × {args.steps} steps", one, args.steps, process)
        print(f"  mean wall per step {wall / args.steps * 1e6:.0f} µs")

        # A separate run: timing each statement costs Python around it (not inside it).
        ones = _statement_cpu(root / "timed-one", 1, args.steps)
        print("\n1 agent: the writer's CPU inside SQLite (apsw calls), µs per step, by statement")
        for kind, ns in ones.most_common():
            print(f"  {kind:<44} {ns / args.steps / 1e3:7.1f}")
        print(f"  {'all statements':<44} {sum(ones.values()) / args.steps / 1e3:7.1f}")

        (root / "pages").mkdir()
        step_pages = _step_pages(root / "pages")
        print("\n1 agent: pages (WAL frames) per transaction of one step, by table or index")
        for index, pages in enumerate(step_pages, 1):
            listed = ", ".join(f"{name} {n}" for name, n in sorted(pages.items()))
            print(f"  transaction {index}: {sum(pages.values()):>2} pages  ({listed})")
        if not step_pages:
            print("  (the WAL restarted during the measured step; run again)")

        many = _ThreadCpu()
        (root / "many").mkdir()
        total = args.agents * args.agent_steps
        wall, process = _steps(root / "many", args.agents, args.agent_steps, many)
        _print_roles(f"{args.agents} agents × {args.agent_steps} steps", many, total, process)
        rate = total / wall
        busy = rate * process / total
        print(
            f"  {rate:.0f} steps/s × {process / total * 1e6:.0f} µs CPU per step = "
            f"{busy:.2f} cores busy (GIL-bound at ≈ 1: steps/s ≈ 1 / CPU per step)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
