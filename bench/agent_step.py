"""Durable agent steps: agentkeep against its physical floors, LangGraph and DBOS, in one run.

One *step*: accept a user message durably, consume it into the conversation, run one
zero-latency inference answering with one text block, persist it, settle (the agent is idle
again). Every engine runs on SQLite in WAL mode with ``synchronous=FULL`` in a fresh temporary
directory. Only the steps are timed: imports, opening, warm-up and teardown are outside every
timer (issue 17).

The floors, measured in the same run, are what the disk allows for the same writes (a
user message and a reply per step) with nothing else around them:

- ``apsw, 1 tx/step``: raw apsw, one ``BEGIN IMMEDIATE … COMMIT`` per step (one fsync);
- ``apsw group commit``: the 64 agents' threads hand their step to one writer thread, which
  commits everything waiting in one transaction (what agentkeep's writer does).

Figures (each printed next to its baseline and the ratio; the issue's goals in brackets):

- 1 agent: median and p99 µs per step against the 1-tx floor's median [≤ 4x, ≤ 8x];
- 64 agents: steps/s against the group-commit floor [≥ 0.25x], and process CPU µs per step
  [≤ 400 µs];
- history: the median of steps 451–500 of one conversation against steps 1–50 [≤ 1.2x], and
  bytes on disk per step at 50/200/400 steps.

Run: ``PYTHONPATH=src .venv/bin/python bench/agent_step.py [--steps N] [--agents 64]``. The
baselines need the ``bench`` dependency group (``pip install --group bench``); a missing one
is reported, not faked.

**On PostgreSQL** (``--database postgresql://…``, or ``--postgres`` to start a throwaway
cluster with ``scripts/postgres_cluster.py`` and stop it at the end): the same steps, every
contender on its own schema (DBOS: its own system database) of the same server, with
``synchronous_commit=on``:

- ``psycopg, 1 tx/step``: raw psycopg, one transaction per step writing the step's two rows;
  with 64 agents each has its own connection (64 concurrent transactions: the server's WAL
  flush combines their commits);
- ``psycopg group commit``: one writer connection commits all that waits in one transaction;
- agentkeep (``database=URL?schema=…``), DBOS Transact (system database on the server) and
  LangGraph's ``PostgresSaver`` (``durability="sync"``, a psycopg pool of one connection per
  agent);
- history: agentkeep alone, a late step of one long conversation against an early one, and
  the bytes its schema holds per step.

CPU is the bench process's (every thread); the server's processes are not counted.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import queue
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import apsw

import agentkeep as ak
from agentkeep.providers import script

_BODY = b'{"role":"user","content":[{"type":"text","text":"step %d"}]}'
_REPLY = b'{"role":"assistant","content":[{"type":"text","text":"ok"}]}'


@dataclass
class Run:
    """What one engine measured: per-step latencies (s), the wall and CPU time of the timed
    region (s), and bytes on disk after some step counts (history runs)."""

    latencies: list[float]
    wall: float
    cpu: float
    disk: dict[int, int] = field(default_factory=dict)
    # Process CPU (every thread) during each step: meaningful with one agent only.
    cpu_per_step: list[float] = field(default_factory=list)

    @property
    def steps_per_second(self) -> float:
        return len(self.latencies) / self.wall

    @property
    def cpu_us_per_step(self) -> float:
        return self.cpu / len(self.latencies) * 1e6

    def median_us(self, start: int = 0, stop: int | None = None) -> float:
        return statistics.median(self.latencies[start:stop]) * 1e6

    def p99_us(self) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e6


Engine = Callable[[Path, int, int], "Run | str"]


class _Timer:
    """The timed region: wall and process CPU time (every thread), started on a barrier."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0

    @contextmanager
    def measure(self) -> Iterator[None]:
        wall, cpu = time.perf_counter(), time.process_time()
        yield
        self.wall = time.perf_counter() - wall
        self.cpu = time.process_time() - cpu


def _in_threads(count: int, step: Callable[[int, int], None], steps: int) -> Run:
    """Run ``steps`` steps in each of ``count`` threads (``step(thread, n)``), timing only
    the steps: the threads are started and parked on a barrier before the timer starts."""
    latencies: list[list[float]] = [[] for _ in range(count)]
    cpu: list[float] = []
    ready = threading.Barrier(count + 1)

    def work(thread: int) -> None:
        mine = latencies[thread]
        ready.wait()
        for n in range(steps):
            started, used = time.perf_counter(), time.process_time()
            step(thread, n)
            mine.append(time.perf_counter() - started)
            if count == 1:
                cpu.append(time.process_time() - used)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(count)]
    for thread in threads:
        thread.start()
    timer = _Timer()
    with timer.measure():
        ready.wait()
        for thread in threads:
            thread.join()
    ordered = [x for mine in latencies for x in mine]
    return Run(ordered, timer.wall, timer.cpu, cpu_per_step=cpu)


def _disk_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.iterdir() if p.is_file())


# -- agentkeep -------------------------------------------------------------------------------


def agentkeep_steps(
    home: Path,
    agents: int,
    steps: int,
    *,
    disk_at: tuple[int, ...] = (),
    database: str | None = None,
) -> Run:
    # record=False: a recording model keeps every request, and each holds the whole context
    # it was shown (memory and GC work growing with the square of the history; the peers'
    # model functions keep nothing).
    model = ak.ScriptedModel([script.text("ok") for _ in range(agents * (steps + 1))], record=False)
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    with ak.AgentSystem.open(
        home, providers=providers, provider="local", model="gym-1", database=database
    ) as system:
        handles = [system.create() for _ in range(agents)]
        for agent in handles:  # warm up (untimed): actor, session, statement cache
            agent.send(ak.user("warm up"))
            agent.wait_for_idle(timeout_seconds=30)
        disk: dict[int, int] = {}
        base = _disk_bytes(home)

        def step(thread: int, n: int) -> None:
            agent = handles[thread]
            agent.send(ak.user(f"step {n}"))
            agent.wait_for_idle(timeout_seconds=30)
            if n + 1 in disk_at:  # one agent only: the pause is outside no one else's step
                disk[n + 1] = _disk_bytes(home) - base

        run = _in_threads(agents, step, steps)
    run.disk = disk
    return run


# -- the floors: raw apsw --------------------------------------------------------------------


def _apsw_connection(path: Path) -> apsw.Connection:
    connection = apsw.Connection(str(path))
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=FULL")
    connection.execute(
        "CREATE TABLE IF NOT EXISTS messages "
        "(agent INTEGER, seq INTEGER, body BLOB, PRIMARY KEY (agent, seq))"
    )
    return connection


def _write_step(connection: apsw.Connection, agent: int, n: int) -> None:
    connection.execute(
        "INSERT INTO messages VALUES (?, ?, ?), (?, ?, ?)",
        (agent, 2 * n, _BODY % n, agent, 2 * n + 1, _REPLY),
    )


def apsw_one_tx_steps(home: Path, agents: int, steps: int) -> Run:
    """One transaction (one fsync) per step; agents take turns on one connection."""
    connection = _apsw_connection(home / "floor.db")
    lock = threading.Lock()

    def step(thread: int, n: int) -> None:
        with lock:
            connection.execute("BEGIN IMMEDIATE")
            _write_step(connection, thread, n)
            connection.execute("COMMIT")

    try:
        return _in_threads(agents, step, steps)
    finally:
        connection.close()


def apsw_group_commit_steps(home: Path, agents: int, steps: int) -> Run:
    """Every agent hands its step to one writer thread, which commits all that waits in one
    transaction and then answers each."""
    connection = _apsw_connection(home / "group.db")
    inbox: queue.SimpleQueue[tuple[int, int, threading.Event] | None] = queue.SimpleQueue()

    def writer() -> None:
        while (first := inbox.get()) is not None:
            group = [first]
            while True:
                try:
                    more = inbox.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    inbox.put(None)
                    break
                group.append(more)
            connection.execute("BEGIN IMMEDIATE")
            for agent, n, _done in group:
                _write_step(connection, agent, n)
            connection.execute("COMMIT")
            for _agent, _n, done in group:
                done.set()

    thread = threading.Thread(target=writer)
    thread.start()

    def step(agent: int, n: int) -> None:
        done = threading.Event()
        inbox.put((agent, n, done))
        done.wait()

    try:
        return _in_threads(agents, step, steps)
    finally:
        inbox.put(None)
        thread.join()
        connection.close()


# -- the peers ---------------------------------------------------------------------------------


def langgraph_steps(home: Path, agents: int, steps: int) -> Run | str:
    try:
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, MessagesState, StateGraph
    except ImportError as error:
        return f"not installed ({error.name})"

    def model(state: MessagesState) -> dict[str, list[tuple[str, str]]]:
        return {"messages": [("ai", "ok")]}

    connection = sqlite3.connect(str(home / "langgraph.db"), check_same_thread=False)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=FULL")
    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_edge(START, "model")
    builder.add_edge("model", END)
    graph = builder.compile(checkpointer=SqliteSaver(connection))

    def invoke(thread: int, text: str) -> None:
        config = {"configurable": {"thread_id": f"agent-{thread}"}}
        # sync durability: each checkpoint is written before the next step starts
        graph.invoke({"messages": [("user", text)]}, config, durability="sync")  # type: ignore[call-arg]

    try:
        try:
            for thread in range(agents):  # warm up (untimed)
                invoke(thread, "warm up")
        except TypeError as error:
            return f"this langgraph has no durability='sync' ({error})"
        return _in_threads(agents, lambda t, n: invoke(t, f"step {n}"), steps)
    finally:
        connection.close()


def dbos_steps(home: Path, agents: int, steps: int) -> Run | str:
    try:
        from dbos import DBOS, DBOSConfig
    except ImportError as error:
        return f"not installed ({error.name})"
    database = home / "dbos.sqlite"
    # WAL is a property of the file: set it before DBOS opens it (its default is the rollback
    # journal, 16 fsyncs per step instead of 4). synchronous=FULL is SQLite's default.
    # (Not ``with connection:``, which opens a transaction: WAL cannot be set inside one.)
    connection = apsw.Connection(str(database))
    try:
        connection.execute("PRAGMA journal_mode=WAL")
    finally:
        connection.close()
    config: DBOSConfig = {
        "name": "agentstep",
        "system_database_url": f"sqlite:///{database}",
        "run_admin_server": False,
        # DBOS() sets its logger from this (INFO by default: ~90 lines per launch, burying
        # the figures); a logging.getLogger("dbos") level set before it is overwritten.
        "log_level": "ERROR",
    }
    DBOS(config=config)

    @DBOS.step()
    def infer(text: str) -> str:
        return "ok"

    @DBOS.workflow()
    def turn(text: str) -> str:
        return str(infer(text))

    DBOS.launch()
    try:
        for thread in range(agents):  # warm up (untimed)
            turn(f"agent {thread} warm up")
        return _in_threads(agents, lambda t, n: turn(f"agent {t} step {n}"), steps)
    finally:
        DBOS.destroy(destroy_registry=True)


# -- the report ------------------------------------------------------------------------------


def _measure(engine: Engine, agents: int, steps: int) -> Run | str:
    with tempfile.TemporaryDirectory() as directory:
        return engine(Path(directory), agents, steps)


def _ratio(ours: float, theirs: float, goal: str) -> str:
    return f"{ours / theirs:6.2f}x  (goal {goal})"


def _one_agent(steps: int) -> None:
    print(f"\n1 agent, {steps} steps: median / p99 µs per step")
    floor = _measure(apsw_one_tx_steps, 1, steps)
    ours = _measure(agentkeep_steps, 1, steps)
    assert isinstance(floor, Run)
    assert isinstance(ours, Run)
    base = floor.median_us()
    print(f"  {'apsw, 1 tx/step':<24} {base:>8.0f} / {floor.p99_us():>8.0f}   (the floor)")
    print(
        f"  {'agentkeep':<24} {ours.median_us():>8.0f} / {ours.p99_us():>8.0f}   "
        f"median {_ratio(ours.median_us(), base, '<= 4x')}   "
        f"p99 {_ratio(ours.p99_us(), base, '<= 8x')}   CPU {ours.cpu_us_per_step:.0f} µs/step"
    )
    for name, engine in (("langgraph (sync)", langgraph_steps), ("dbos (sqlite, WAL)", dbos_steps)):
        theirs = _measure(engine, 1, steps)
        if isinstance(theirs, str):
            print(f"  {name:<24} {theirs}")
            continue
        print(
            f"  {name:<24} {theirs.median_us():>8.0f} / {theirs.p99_us():>8.0f}   "
            f"median {theirs.median_us() / base:6.2f}x the floor, "
            f"{theirs.median_us() / ours.median_us():.2f}x agentkeep"
        )


def _many_agents(agents: int, steps: int) -> None:
    print(f"\n{agents} agents, {steps} steps each: steps/s, CPU µs per step")
    floors: dict[str, Run] = {}
    for name, engine in (
        ("apsw, 1 tx/step", apsw_one_tx_steps),
        ("apsw group commit", apsw_group_commit_steps),
    ):
        run = _measure(engine, agents, steps)
        assert isinstance(run, Run)
        floors[name] = run
        print(
            f"  {name:<24} {run.steps_per_second:>9.0f} steps/s  CPU {run.cpu_us_per_step:>5.0f} µs"
        )
    base = floors["apsw group commit"].steps_per_second
    ours = _measure(agentkeep_steps, agents, steps)
    assert isinstance(ours, Run)
    print(
        f"  {'agentkeep':<24} {ours.steps_per_second:>9.0f} steps/s  "
        f"CPU {ours.cpu_us_per_step:>5.0f} µs (goal <= 400)   "
        f"{_ratio(ours.steps_per_second, base, '>= 0.25x')} the group-commit floor"
    )
    for name, engine in (("langgraph (sync)", langgraph_steps), ("dbos (sqlite, WAL)", dbos_steps)):
        theirs = _measure(engine, agents, steps)
        if isinstance(theirs, str):
            print(f"  {name:<24} {theirs}")
            continue
        print(
            f"  {name:<24} {theirs.steps_per_second:>9.0f} steps/s  "
            f"CPU {theirs.cpu_us_per_step:>5.0f} µs   "
            f"{theirs.steps_per_second / ours.steps_per_second:.2f}x agentkeep"
        )


def _report_history(ours: Run, steps: int, window: int) -> None:
    """The last ``window`` steps of one conversation against its first: wall and CPU."""
    early = ours.median_us(0, window)
    late = ours.median_us(steps - window, steps)
    print(
        f"  agentkeep  steps 1-{window}: {early:.0f}   steps {steps - window + 1}-{steps}: "
        f"{late:.0f}   {_ratio(late, early, '<= 1.2x')}"
    )
    cpu_early = statistics.median(ours.cpu_per_step[:window]) * 1e6
    cpu_late = statistics.median(ours.cpu_per_step[steps - window :]) * 1e6
    print(
        f"  agentkeep  CPU µs per step (less sensitive to load), steps 1-{window}: "
        f"{cpu_early:.0f}   steps {steps - window + 1}-{steps}: {cpu_late:.0f}   "
        f"{cpu_late / cpu_early:.2f}x"
    )


def _history(steps: int) -> None:
    window = max(1, steps // 10)
    marks = tuple(m for m in (50, 200, 400) if m <= steps)
    print(f"\nhistory: one conversation of {steps} steps, median µs per step by position")
    with tempfile.TemporaryDirectory() as directory:
        ours = agentkeep_steps(Path(directory), 1, steps, disk_at=marks)
    _report_history(ours, steps, window)
    previous_mark, previous_size = 0, 0
    for mark, size in sorted(ours.disk.items()):
        added = (size - previous_size) / (mark - previous_mark)
        print(
            f"  bytes on disk after {mark:>3} steps: {size:>10,} (database and WAL file); "
            f"{added:>8,.0f} per step since step {previous_mark}"
        )
        previous_mark, previous_size = mark, size
    for name, engine in (("langgraph (sync)", langgraph_steps),):
        theirs = _measure(engine, 1, steps)
        if isinstance(theirs, str):
            print(f"  {name:<24} {theirs}")
            continue
        early, late = theirs.median_us(0, window), theirs.median_us(steps - window, steps)
        print(
            f"  {name:<10} steps 1-{window}: {early:.0f}   last {window}: {late:.0f}   "
            f"{late / early:.2f}x"
        )


# -- PostgreSQL: the server, the floors and the peers -------------------------------------------

_REPO = Path(__file__).resolve().parents[1]


def _with_query(url: str, **params: str) -> str:
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k not in params]
    return urlunsplit(parts._replace(query=urlencode([*query, *params.items()])))


def _without_schema(url: str) -> str:
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "schema"]
    return urlunsplit(parts._replace(query=urlencode(query)))


def _with_database(url: str, database: str) -> str:
    return urlunsplit(urlsplit(_without_schema(url))._replace(path=f"/{database}"))


class Server:
    """One PostgreSQL server every contender runs on: a fresh schema (or database) each,
    dropped afterwards. ``url`` is libpq's, without a ``schema`` parameter."""

    def __init__(self, url: str) -> None:
        self.url = _without_schema(url)

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as admin:
            admin.execute(sql)  # type: ignore[arg-type]

    @contextmanager
    def schema(self) -> Iterator[str]:
        """A new empty schema; yields its name, dropped (CASCADE) on exit."""
        name = f"bench_{uuid.uuid4().hex[:12]}"
        self._admin(f"CREATE SCHEMA {name}")
        try:
            yield name
        finally:
            self._admin(f"DROP SCHEMA IF EXISTS {name} CASCADE")

    @contextmanager
    def database(self) -> Iterator[str]:
        """A new empty database; yields its URL, dropped (forcing its sessions off) on exit."""
        name = f"bench_{uuid.uuid4().hex[:12]}"
        self._admin(f"CREATE DATABASE {name}")
        try:
            yield _with_database(self.url, name)
        finally:
            self._admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def settings(self) -> str:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as admin:
            rows = admin.execute(
                "SELECT current_setting('server_version'), current_setting('fsync'), "
                "current_setting('synchronous_commit'), current_setting('wal_sync_method')"
            ).fetchone()
        assert rows is not None
        version, fsync, synchronous, method = rows
        return (
            f"PostgreSQL {version}, fsync={fsync}, synchronous_commit={synchronous}, "
            f"wal_sync_method={method}"
        )


def _pg_connect(url: str, schema: str) -> object:
    import psycopg

    connection = psycopg.connect(url, options=f"-c search_path={schema}")
    connection.execute(
        "CREATE TABLE IF NOT EXISTS messages "
        "(agent BIGINT, seq BIGINT, body BYTEA, PRIMARY KEY (agent, seq))"
    )
    connection.commit()
    return connection


def _pg_write_step(connection: object, agent: int, n: int) -> None:
    connection.execute(  # type: ignore[attr-defined]
        "INSERT INTO messages VALUES (%s, %s, %s), (%s, %s, %s)",
        (agent, 2 * n, _BODY % n, agent, 2 * n + 1, _REPLY),
    )


def psycopg_one_tx(server: Server) -> Engine:
    """One transaction per step, each agent on its own connection (concurrent transactions)."""

    def engine(home: Path, agents: int, steps: int) -> Run:
        with server.schema() as schema:
            connections = [_pg_connect(server.url, schema) for _ in range(agents)]
            for agent, connection in enumerate(connections):  # warm up (untimed)
                _pg_write_step(connection, agent, -1)
                connection.commit()  # type: ignore[attr-defined]

            def step(thread: int, n: int) -> None:
                connection = connections[thread]
                _pg_write_step(connection, thread, n)
                connection.commit()  # type: ignore[attr-defined]

            try:
                return _in_threads(agents, step, steps)
            finally:
                for connection in connections:
                    connection.close()  # type: ignore[attr-defined]

    return engine


def psycopg_group_commit(server: Server) -> Engine:
    """Every agent hands its step to one writer thread on one connection, which commits all
    that waits in one transaction and then answers each."""

    def engine(home: Path, agents: int, steps: int) -> Run:
        with server.schema() as schema:
            connection = _pg_connect(server.url, schema)
            inbox: queue.SimpleQueue[tuple[int, int, threading.Event] | None]
            inbox = queue.SimpleQueue()

            def writer() -> None:
                while (first := inbox.get()) is not None:
                    group = [first]
                    while True:
                        try:
                            more = inbox.get_nowait()
                        except queue.Empty:
                            break
                        if more is None:
                            inbox.put(None)
                            break
                        group.append(more)
                    for agent, n, _done in group:
                        _pg_write_step(connection, agent, n)
                    connection.commit()  # type: ignore[attr-defined]
                    for _agent, _n, done in group:
                        done.set()

            thread = threading.Thread(target=writer)
            thread.start()

            def step(agent: int, n: int) -> None:
                done = threading.Event()
                inbox.put((agent, n, done))
                done.wait()

            try:
                step(0, -1)  # warm up (untimed)
                return _in_threads(agents, step, steps)
            finally:
                inbox.put(None)
                thread.join()
                connection.close()  # type: ignore[attr-defined]

    return engine


def agentkeep_on(server: Server) -> Engine:
    def engine(home: Path, agents: int, steps: int) -> Run:
        with server.schema() as schema:
            url = _with_query(server.url, schema=schema)
            return agentkeep_steps(home, agents, steps, database=url)

    return engine


def langgraph_postgres(server: Server) -> Engine:
    def engine(home: Path, agents: int, steps: int) -> Run | str:
        try:
            from langgraph.checkpoint.postgres import PostgresSaver
            from langgraph.graph import END, START, MessagesState, StateGraph
            from psycopg.rows import dict_row
            from psycopg_pool import ConnectionPool
        except ImportError as error:
            return f"not installed ({error.name})"

        def model(state: MessagesState) -> dict[str, list[tuple[str, str]]]:
            return {"messages": [("ai", "ok")]}

        with server.schema() as schema:
            # what langgraph's own PostgresSaver.from_conn_string sets, plus the schema
            pool = ConnectionPool(
                server.url,
                min_size=agents,
                max_size=agents,
                kwargs={
                    "autocommit": True,
                    "prepare_threshold": 0,
                    "row_factory": dict_row,
                    "options": f"-c search_path={schema}",
                },
                open=True,
            )
            try:
                saver = PostgresSaver(pool)  # type: ignore[arg-type]
                saver.setup()
                builder = StateGraph(MessagesState)
                builder.add_node("model", model)
                builder.add_edge(START, "model")
                builder.add_edge("model", END)
                graph = builder.compile(checkpointer=saver)

                def invoke(thread: int, text: str) -> None:
                    config = {"configurable": {"thread_id": f"agent-{thread}"}}
                    graph.invoke({"messages": [("user", text)]}, config, durability="sync")  # type: ignore[call-arg]

                for thread in range(agents):  # warm up (untimed)
                    invoke(thread, "warm up")
                return _in_threads(agents, lambda t, n: invoke(t, f"step {n}"), steps)
            finally:
                pool.close()

    return engine


def dbos_postgres(server: Server) -> Engine:
    def engine(home: Path, agents: int, steps: int) -> Run | str:
        try:
            from dbos import DBOS, DBOSConfig
        except ImportError as error:
            return f"not installed ({error.name})"
        with server.database() as url:
            config: DBOSConfig = {
                "name": "agentstep",
                "system_database_url": url,
                "run_admin_server": False,
                "log_level": "ERROR",
            }
            DBOS(config=config)

            @DBOS.step()
            def infer(text: str) -> str:
                return "ok"

            @DBOS.workflow()
            def turn(text: str) -> str:
                return str(infer(text))

            DBOS.launch()
            try:
                for thread in range(agents):  # warm up (untimed)
                    turn(f"agent {thread} warm up")
                return _in_threads(agents, lambda t, n: turn(f"agent {t} step {n}"), steps)
            finally:
                DBOS.destroy(destroy_registry=True)

    return engine


def _figures(run: Run) -> str:
    return (
        f"{run.median_us():>8.0f} / {run.p99_us():>8.0f}  CPU {run.cpu_us_per_step:>5.0f} µs"
        f"  {run.steps_per_second:>7.0f} steps/s"
    )


def _pg_one_agent(server: Server, steps: int) -> None:
    print(f"\n1 agent, {steps} steps: median / p99 µs per step, CPU µs per step, steps/s")
    floor = _measure(psycopg_one_tx(server), 1, steps)
    ours = _measure(agentkeep_on(server), 1, steps)
    assert isinstance(floor, Run)
    assert isinstance(ours, Run)
    base = floor.median_us()
    print(f"  {'psycopg, 1 tx/step':<26} {_figures(floor)}   (the floor)")
    print(
        f"  {'agentkeep':<26} {_figures(ours)}   "
        f"median {_ratio(ours.median_us(), base, '<= 4x')}   "
        f"p99 {_ratio(ours.p99_us(), base, '<= 8x')}"
    )
    for name, engine in (
        ("langgraph (postgres, sync)", langgraph_postgres(server)),
        ("dbos (postgres)", dbos_postgres(server)),
    ):
        theirs = _measure(engine, 1, steps)
        if isinstance(theirs, str):
            print(f"  {name:<26} {theirs}")
            continue
        print(
            f"  {name:<26} {_figures(theirs)}   "
            f"median {theirs.median_us() / base:6.2f}x the floor, "
            f"{theirs.median_us() / ours.median_us():.2f}x agentkeep"
        )


def _pg_many_agents(server: Server, agents: int, steps: int) -> None:
    print(f"\n{agents} agents, {steps} steps each: steps/s, CPU µs per step, median µs per step")
    floors: dict[str, Run] = {}
    for name, engine in (
        ("psycopg, 1 tx/step", psycopg_one_tx(server)),
        ("psycopg group commit", psycopg_group_commit(server)),
    ):
        run = _measure(engine, agents, steps)
        assert isinstance(run, Run)
        floors[name] = run
        print(
            f"  {name:<26} {run.steps_per_second:>9.0f} steps/s  CPU {run.cpu_us_per_step:>5.0f} µs"
            f"  median {run.median_us():>7.0f} µs"
        )
    base = floors["psycopg group commit"].steps_per_second
    concurrent = floors["psycopg, 1 tx/step"].steps_per_second
    ours = _measure(agentkeep_on(server), agents, steps)
    assert isinstance(ours, Run)
    print(
        f"  {'agentkeep':<26} {ours.steps_per_second:>9.0f} steps/s  "
        f"CPU {ours.cpu_us_per_step:>5.0f} µs  median {ours.median_us():>7.0f} µs   "
        f"{_ratio(ours.steps_per_second, base, '>= 0.25x')} the group-commit floor, "
        f"{ours.steps_per_second / concurrent:.2f}x the concurrent 1-tx floor"
    )
    for name, engine in (
        ("langgraph (postgres, sync)", langgraph_postgres(server)),
        ("dbos (postgres)", dbos_postgres(server)),
    ):
        theirs = _measure(engine, agents, steps)
        if isinstance(theirs, str):
            print(f"  {name:<26} {theirs}")
            continue
        print(
            f"  {name:<26} {theirs.steps_per_second:>9.0f} steps/s  "
            f"CPU {theirs.cpu_us_per_step:>5.0f} µs  median {theirs.median_us():>7.0f} µs   "
            f"{theirs.steps_per_second / ours.steps_per_second:.2f}x agentkeep"
        )


def _pg_history(server: Server, steps: int) -> None:
    """As :func:`_history`, agentkeep only, on its schema of the server: a step late in a
    long conversation against one early, and what the schema holds per step."""
    import psycopg

    window = max(1, steps // 10)
    print(f"\nhistory: one conversation of {steps} steps, median µs per step by position")
    with server.schema() as schema, tempfile.TemporaryDirectory() as directory:
        url = _with_query(server.url, schema=schema)
        ours = agentkeep_steps(Path(directory), 1, steps, database=url)
        with psycopg.connect(server.url, autocommit=True) as admin:
            row = admin.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relkind IN ('r', 'm')",
                (schema,),
            ).fetchone()
    _report_history(ours, steps, window)
    size = 0 if row is None else int(row[0])
    print(f"  bytes in the schema (tables, indexes, TOAST): {size:,}; {size / steps:,.0f} per step")


def _cluster_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "postgres_cluster", _REPO / "scripts" / "postgres_cluster.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextmanager
def _server(url: str | None) -> Iterator[Server]:
    """The given server, or a throwaway cluster started now and stopped (removed) on exit."""
    if url:
        yield Server(url)
        return
    import shutil

    script = _cluster_script()
    directory = Path(tempfile.mkdtemp(prefix="agentkeep-bench-pg-"))
    try:
        yield Server(script.start(directory, timeout=60))
    finally:
        with contextlib.suppress(Exception):
            script.stop(directory)
        shutil.rmtree(directory, ignore_errors=True)


def _postgres_main(args: argparse.Namespace) -> int:
    load = os.getloadavg()
    with _server(args.database) as server:
        print(
            f"durable agent steps on PostgreSQL ({server.settings()}); load average "
            f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} CPUs"
        )
        if args.only in (None, "one"):
            _pg_one_agent(server, args.steps)
        if args.only in (None, "many"):
            _pg_many_agents(server, args.agents, args.agent_steps)
        if args.only in (None, "history"):
            _pg_history(server, args.history)
        load = os.getloadavg()
        print(f"\nload average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="steps of the 1-agent run")
    parser.add_argument("--agents", type=int, default=64, help="agents in the concurrent run")
    parser.add_argument("--agent-steps", type=int, default=30, help="steps per agent there")
    parser.add_argument("--history", type=int, default=500, help="steps of the history run")
    parser.add_argument(
        "--only", choices=("one", "many", "history"), help="run one part of the bench"
    )
    parser.add_argument(
        "--database", metavar="URL", help="a PostgreSQL server's URL: run on PostgreSQL there"
    )
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="run on PostgreSQL, on a throwaway cluster started now (without --database)",
    )
    args = parser.parse_args(argv)
    if args.database or args.postgres:
        return _postgres_main(args)
    load = os.getloadavg()
    print(
        f"durable agent steps, WAL + synchronous=FULL; load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} CPUs"
    )
    if args.only in (None, "one"):
        _one_agent(args.steps)
    if args.only in (None, "many"):
        _many_agents(args.agents, args.agent_steps)
    if args.only in (None, "history"):
        _history(args.history)
    return 0


if __name__ == "__main__":
    sys.exit(main())
