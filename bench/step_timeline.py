"""Where one agent's durable step spends its wall time: its critical path, hop by hop.

``bench/agent_step.py`` says how long a step takes against its floor; ``step_anatomy.py``
says where its CPU goes, by thread. This one follows the step's *critical path*: one agent,
one step at a time, so at every instant one thread carries the step and the others wait.
It records when each hop happens — wrappers around five internal methods, installed from the
outside (the agent actor's ``_receive``, the writer's ``_run_group``, its backend's
``commit``, ``WorkItem.wait``; ``send`` and ``wait_for_idle`` are timed by the bench) —
and prints the median of each phase over the steps:

====  ==================================================================================
 1    caller: ``send`` until the acceptance is handed to the writer
 2    hand-off: the writer's thread starts the acceptance's group
 3    writer: the acceptance's ``BEGIN`` and statements
 4    **durable commit**: the acceptance's COMMIT (SQLite: its fsync; PostgreSQL: the
      round trip and the server's WAL flush)
 5    answer: the writer answers, the caller's thread runs again
 6    caller: ``send`` returns; the agent actor's thread starts on the claim
 7    agent: the claim (the turn starts, inference is started)
 8    inference: the worker thread streams the zero-latency reply, the actor takes it
 9    agent: the reply folded into the turn, its commit handed to the writer
10    hand-off, 11 writer, **12 durable commit**, 13 answer: as 2–5, for the reply
14    agent: the turn settles; ``wait_for_idle`` returns in the caller
====  ==================================================================================

next to floors measured in the same run: the raw one-transaction step (the floor
``agent_step.py``'s ratio is against) and the raw **two**-transaction step, a step's durable
minimum here: the acceptance must be committed before ``send`` returns and the reply can only
be committed after the model produced it (docs/invariants.md, I1 and I4), so no runtime on
this design commits a step once. And a third: **the step's own SQL replayed** — the
statements the writer ran for each step (captured from a run of their own), run again into a
store left in the same state (the same session id, warmed up by as many steps), with nothing
around them: what the data model costs the database, whatever the runtime. On SQLite raw apsw
runs them; on PostgreSQL raw libpq sends each transaction's statements in one pipeline
(prepared, their parameters dumped beforehand) and waits once, at its Sync.

Run: ``PYTHONPATH=src .venv/bin/python bench/step_timeline.py [--steps 500]`` (SQLite), with
``--database postgresql://…`` or ``--postgres`` (a throwaway cluster) on PostgreSQL.
Diagnostic figures, not goals: the wrappers add ~1–2 µs to each phase they bound.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import itertools
import os
import select
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import agentkeep as ak
from agentkeep.actors.agent_actor import AgentActor
from agentkeep.persistence.inbox import WorkItem
from agentkeep.persistence.postgres.batch import Batch, numbered
from agentkeep.persistence.postgres.writer import PostgresWriterBackend
from agentkeep.persistence.sqlite_writer import SqliteWriterBackend
from agentkeep.persistence.writer import StoreWriter
from agentkeep.providers import script
from agentkeep.types import new_id

# Each phase and its kind, for the totals: the commits, the writer's own work, thread
# hand-offs (a thread waking another and that one starting), and the runtime's Python
# around them.
_PHASES = (
    ("caller: send, until the acceptance is handed over", "runtime"),
    ("hand-off to the writer", "hand-off"),
    ("writer: BEGIN and the acceptance's statements", "writer"),
    ("durable commit of the acceptance", "commit"),
    ("answer: the caller runs again", "hand-off"),
    ("caller: send returns; the agent actor starts", "hand-off"),
    ("agent: the claim (turn started, inference started)", "runtime"),
    ("inference: worker streams, actor takes the reply", "hand-off"),
    ("agent: the reply into the turn, commit handed over", "runtime"),
    ("hand-off to the writer", "hand-off"),
    ("writer: BEGIN and the reply's statements", "writer"),
    ("durable commit of the reply", "commit"),
    ("answer: the agent actor runs again", "hand-off"),
    ("agent: the turn settles; wait_for_idle returns", "runtime"),
)


def _agent_step() -> ModuleType:
    """``bench/agent_step.py``: its floors, its server and its timing, shared."""
    path = Path(__file__).resolve().with_name("agent_step.py")
    spec = importlib.util.spec_from_file_location("agent_step", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["agent_step"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


# -- recording the hops --------------------------------------------------------------------


class Recorder:
    """Timestamps (``perf_counter_ns``) of the hops, per step, from wrappers installed on the
    runtime's classes for the recorder's life (see the module)."""

    def __init__(self) -> None:
        self.events: list[tuple[int, str]] = []
        self._undo: list[Callable[[], None]] = []
        self.callers: set[int] = set()

    def mark(self, label: str) -> None:
        self.events.append((time.perf_counter_ns(), label))

    def _wrap(self, owner: type, name: str, before: str, after: str) -> None:
        original = owner.__dict__[name]
        mark = self.mark

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            mark(before)
            try:
                return original(*args, **kwargs)
            finally:
                mark(after)

        setattr(owner, name, wrapper)
        self._undo.append(lambda: setattr(owner, name, original))

    @contextmanager
    def installed(self) -> Iterator[Recorder]:
        callers = self.callers
        mark = self.mark
        original_wait = WorkItem.__dict__["wait"]

        def wait(item: WorkItem, timeout_seconds: float | None) -> Any:
            # The caller's thread hands the acceptance over; any other, the agent's reply.
            who = "caller" if threading.get_ident() in callers else "agent"
            mark(f"{who} hands over")
            try:
                return original_wait(item, timeout_seconds)
            finally:
                mark(f"{who} answered")

        setattr(WorkItem, "wait", wait)  # noqa: B010 (a class attribute, replaced)
        self._undo.append(lambda: setattr(WorkItem, "wait", original_wait))
        self._wrap(StoreWriter, "_run_group", "group starts", "group ends")
        for backend in (SqliteWriterBackend, PostgresWriterBackend):
            self._wrap(backend, "commit", "commit starts", "commit ends")
        self._wrap(AgentActor, "_receive", "actor receives", "actor done")
        try:
            yield self
        finally:
            for undo in reversed(self._undo):
                undo()
            self._undo.clear()


def _phases(events: list[tuple[int, str]]) -> list[float]:
    """One step's 14 phase durations (µs) from its events, in order (see the module)."""
    at: dict[str, list[int]] = {}
    for when, label in events:
        at.setdefault(label, []).append(when)

    def first(label: str, after: int = 0) -> int:
        return next(t for t in at[label] if t >= after)

    def last(label: str, before: int) -> int:
        return max(t for t in at[label] if t <= before)

    send, sent, idle = at["send"][0], at["sent"][0], at["idle"][0]
    handed = first("caller hands over", send)
    group1 = first("group starts", handed)
    commit1 = first("commit starts", group1)
    committed1 = first("commit ends", commit1)
    answered1 = first("caller answered", committed1)
    received = first("actor receives", sent)
    claimed = first("actor done", received)
    streamed = first("actor receives", claimed)
    reply = first("agent hands over", streamed)
    group2 = first("group starts", reply)
    commit2 = first("commit starts", group2)
    committed2 = first("commit ends", commit2)
    answered2 = first("agent answered", committed2)
    marks = [send, handed, group1, commit1, committed1, answered1]
    marks += [received, claimed, streamed, reply, group2, commit2, committed2, answered2, idle]
    assert marks == sorted(marks), "the hops came out of order"
    assert last("actor done", idle) >= answered2
    return [(b - a) / 1000 for a, b in itertools.pairwise(marks)]


_WARM_UP = 10  # untimed steps first: prepared statements, caches


@contextmanager
def _warmed_agent(home: Path, database: str | None, steps: int, agent_id: str) -> Iterator[Any]:
    """A system with one session, ``agent_id``, after :data:`_WARM_UP` steps; room for
    ``steps`` more."""
    model = ak.ScriptedModel(
        [script.text("ok") for _ in range(steps + _WARM_UP + 10)], record=False
    )
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    with ak.AgentSystem.open(
        home, providers=providers, provider="local", model="gym-1", database=database
    ) as system:
        agent = system.create(id=agent_id)
        for n in range(_WARM_UP):
            agent.send(ak.user(f"warm up {n}"))
            agent.wait_for_idle(timeout_seconds=30)
        yield agent


def agentkeep_timeline(home: Path, steps: int, database: str | None) -> list[list[float]]:
    """``steps`` steps of one agent; each step's phases (µs)."""
    recorder = Recorder()
    recorder.callers.add(threading.get_ident())
    timelines: list[list[float]] = []
    with _warmed_agent(home, database, steps, new_id()) as agent, recorder.installed():
        for n in range(steps):
            recorder.events.clear()
            recorder.mark("send")
            agent.send(ak.user(f"step {n}"))
            recorder.mark("sent")
            agent.wait_for_idle(timeout_seconds=30)
            recorder.mark("idle")
            timelines.append(_phases(recorder.events))
    return timelines


# -- the floors ----------------------------------------------------------------------------


def _median_step(step: Callable[[int], None], steps: int) -> float:
    """The median µs of ``step(n)`` over ``steps`` runs, after ten untimed ones."""
    for n in range(10):
        step(-1 - n)
    times = []
    for n in range(steps):
        start = time.perf_counter()
        step(n)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def sqlite_floors(bench: ModuleType, home: Path, steps: int) -> tuple[float, float]:
    """Raw apsw (WAL, ``synchronous=FULL``): the step's two rows in one transaction, and in
    two (the acceptance's row, then the reply's)."""
    connection = bench._apsw_connection(home / "floor.db")
    insert = "INSERT INTO messages VALUES (?, ?, ?)"

    def one(n: int) -> None:
        connection.execute("BEGIN IMMEDIATE")
        bench._write_step(connection, 0, n)
        connection.execute("COMMIT")

    def two(n: int) -> None:
        for row in ((1, 2 * n, bench._BODY % n), (1, 2 * n + 1, bench._REPLY)):
            connection.execute("BEGIN IMMEDIATE")
            connection.execute(insert, row)
            connection.execute("COMMIT")

    try:
        return _median_step(one, steps), _median_step(two, steps)
    finally:
        connection.close()


def postgres_floors(bench: ModuleType, server: Any, steps: int) -> tuple[float, float]:
    """Raw psycopg (``synchronous_commit=on``): as :func:`sqlite_floors`."""
    with server.schema() as schema:
        connection = bench._pg_connect(server.url, schema)
        insert = "INSERT INTO messages VALUES (%s, %s, %s)"

        def one(n: int) -> None:
            bench._pg_write_step(connection, 0, n)
            connection.commit()

        def two(n: int) -> None:
            for row in ((1, 2 * n, bench._BODY % n), (1, 2 * n + 1, bench._REPLY)):
                connection.execute(insert, row)
                connection.commit()

        try:
            return _median_step(one, steps), _median_step(two, steps)
        finally:
            connection.close()


# -- the step's own SQL, replayed ------------------------------------------------------------------

Statement = tuple[str, tuple[Any, ...]]


def capture_steps(home: Path, url: str, steps: int, agent_id: str) -> list[list[list[Statement]]]:
    """What the writer sent to the server for each of ``steps`` steps, transaction by
    transaction (``BEGIN`` … ``COMMIT``), in psycopg's placeholders."""
    sent: list[Statement] = []
    original_send, original_ask = Batch.__dict__["send"], Batch.__dict__["ask"]

    def send(batch: Batch, sql: str, params: Any = ()) -> None:
        sent.append((sql, tuple(params)))
        original_send(batch, sql, params)

    def ask(batch: Batch, sql: str, answer: Any) -> None:
        sent.append((sql, ()))
        original_ask(batch, sql, answer)

    captured: list[list[list[Statement]]] = []
    with _warmed_agent(home, url, steps, agent_id) as agent:
        setattr(Batch, "send", send)  # noqa: B010
        setattr(Batch, "ask", ask)  # noqa: B010
        try:
            for n in range(steps):
                sent.clear()
                agent.send(ak.user(f"step {n}"))
                agent.wait_for_idle(timeout_seconds=30)
                captured.append(_transactions(sent))
        finally:
            setattr(Batch, "send", original_send)  # noqa: B010
            setattr(Batch, "ask", original_ask)  # noqa: B010
    return captured


def _transactions(sent: list[Statement]) -> list[list[Statement]]:
    """``sent`` cut into its transactions; checks that it is a whole number of them."""
    transactions: list[list[Statement]] = []
    for sql, params in sent:
        if sql == "BEGIN":
            transactions.append([])
        if not transactions:
            raise RuntimeError(f"a statement outside a transaction: {sql!r}")
        transactions[-1].append((sql, params))
    if not transactions or any(tx[-1][0] != "COMMIT" for tx in transactions):
        raise RuntimeError("a step's statements are not whole transactions")
    return transactions


def replay_steps(url: str, schema: str, captured: list[list[list[Statement]]]) -> float:
    """The median µs of a captured step sent again over libpq's pipeline mode with nothing
    around it: every statement prepared and its parameters dumped beforehand (untimed), then
    per transaction its statements sent in one go, one Sync, and every result read."""
    import psycopg
    from psycopg import pq
    from psycopg.adapt import PyFormat, Transformer

    with psycopg.connect(url, autocommit=True, options=f"-c search_path={schema}") as connection:
        pgconn = connection.pgconn
        dumper = Transformer(connection)
        names: dict[tuple[str, tuple[int, ...]], bytes] = {}
        ready: list[list[list[tuple[bytes | None, bytes, Any, Any]]]] = []
        for step in captured:  # untimed: parse, dump, prepare
            ready.append([])
            for transaction in step:
                ready[-1].append([])
                for sql, params in transaction:
                    text, _count = numbered(sql)
                    if not params:
                        ready[-1][-1].append((None, text, None, None))
                        continue
                    values = dumper.dump_sequence(params, [PyFormat.AUTO] * len(params))
                    key = (sql, tuple(dumper.types or ()))
                    if key not in names:
                        names[key] = f"replay{len(names)}".encode()
                        made = pgconn.prepare(names[key], text, param_types=key[1])
                        if made.status != pq.ExecStatus.COMMAND_OK:
                            message = made.error_message.decode(errors="replace")
                            raise RuntimeError(f"cannot prepare {sql!r}: {message}")
                    ready[-1][-1].append((names[key], text, values, tuple(dumper.formats or ())))
        pgconn.enter_pipeline_mode()
        times = []
        for sent_step in ready:
            start = time.perf_counter()
            for sent in sent_step:
                for name, text, values, formats in sent:
                    if name is None:
                        pgconn.send_query_params(text, None)
                    else:
                        pgconn.send_query_prepared(name, values, param_formats=formats)
                pgconn.pipeline_sync()
                _read_to_sync(pgconn, pq)
            times.append(time.perf_counter() - start)
        pgconn.exit_pipeline_mode()
    return statistics.median(times[_WARM_UP:]) * 1e6


def _read_to_sync(pgconn: Any, pq: Any) -> None:
    """Flush, then read every result up to the pipeline's Sync; raises the first error."""
    while pgconn.flush():
        select.select([], [pgconn.socket], [])
    while True:
        while pgconn.is_busy():
            select.select([pgconn.socket], [], [])
            pgconn.consume_input()
        result = pgconn.get_result()
        if result is None:
            continue
        if result.status == pq.ExecStatus.PIPELINE_SYNC:
            return
        if result.status in (pq.ExecStatus.FATAL_ERROR, pq.ExecStatus.PIPELINE_ABORTED):
            message = result.error_message.decode(errors="replace")
            raise RuntimeError(f"the replay failed: {message}")


def sqlite_replay(home: Path, steps: int) -> float:
    """As :func:`postgres_replay`, on SQLite: the writer connection's statements (apsw's
    ``exec_trace``), replayed by raw apsw with the writer's settings."""
    import apsw

    streams: list[list[Any]] = []

    def hook(connection: apsw.Connection) -> None:
        stream: list[Any] = []
        streams.append(stream)

        def trace(_cursor: apsw.Cursor, sql: str, bindings: Any) -> bool:
            stream.append((sql, () if bindings is None else tuple(bindings)))
            return True

        connection.exec_trace = trace

    agent_id = new_id()
    apsw.connection_hooks.append(hook)
    try:
        with _warmed_agent(home / "capture", None, steps + _WARM_UP, agent_id) as agent:
            for n in range(steps + _WARM_UP):
                for stream in streams:
                    stream.append(None)  # a step starts
                agent.send(ak.user(f"step {n}"))
                agent.wait_for_idle(timeout_seconds=30)
            for stream in streams:
                stream.append(None)
    finally:
        apsw.connection_hooks.remove(hook)
    writer = [s for s in streams if any(item == ("BEGIN IMMEDIATE", ()) for item in s)]
    if len(writer) != 1:
        raise RuntimeError(f"expected one writer connection, found {len(writer)}")
    cuts = [i for i, item in enumerate(writer[0]) if item is None]
    captured = [_sqlite_transactions(writer[0][a + 1 : b]) for a, b in itertools.pairwise(cuts)]
    with _warmed_agent(home / "target", None, 0, agent_id):
        pass
    last_event = _LAST_EVENT.replace("%s", "?")
    with contextlib.closing(apsw.Connection(str(home / "capture" / "agents.db"))) as capture:
        written = capture.execute(last_event, (agent_id,)).fetchone()
    connection = apsw.Connection(str(home / "target" / "agents.db"))
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("PRAGMA synchronous = FULL")
    connection.execute("PRAGMA foreign_keys = ON")
    try:
        times = []
        for step in captured:
            start = time.perf_counter()
            for transaction in step:
                for sql, bindings in transaction:
                    connection.execute(sql, bindings).fetchall()
            times.append(time.perf_counter() - start)
        _check_replayed(written, connection.execute(last_event, (agent_id,)).fetchone())
    finally:
        connection.close()
    return statistics.median(times[_WARM_UP:]) * 1e6


def _sqlite_transactions(ran: list[Statement]) -> list[list[Statement]]:
    """The transactions in what the writer ran during a step (checkpoints and other
    statements between them are the runtime's upkeep, not the step's SQL)."""
    transactions: list[list[Statement]] = []
    inside = False
    for sql, bindings in ran:
        if sql == "BEGIN IMMEDIATE":
            transactions.append([])
            inside = True
        if inside:
            transactions[-1].append((sql, bindings))
        if sql == "COMMIT":
            inside = False
    if not transactions or inside:
        raise RuntimeError("a step's statements are not whole transactions")
    return transactions


def postgres_replay(bench: ModuleType, server: Any, home: Path, steps: int) -> float:
    """Capture ``steps`` steps on one schema, replay them on another that one more system
    left in the same state (same session id, as many warm-up steps)."""
    import psycopg

    def last_event(schema: str) -> tuple[Any, ...] | None:
        with psycopg.connect(server.url, options=f"-c search_path={schema}") as connection:
            return connection.execute(_LAST_EVENT, (agent_id,)).fetchone()

    agent_id = new_id()
    with server.schema() as schema:
        url = bench._with_query(server.url, schema=schema)
        captured = capture_steps(home / "capture", url, steps + _WARM_UP, agent_id)
        written = last_event(schema)
    with server.schema() as schema:
        url = bench._with_query(server.url, schema=schema)
        with _warmed_agent(home / "target", url, 0, agent_id):
            pass
        median = replay_steps(server.url, schema, captured)
        _check_replayed(written, last_event(schema))
    return median


#: The session's last ledger event: the replay wrote what the capture did if they agree.
_LAST_EVENT = (
    "SELECT sequence, type, data_json FROM session_events WHERE agent_id = %s "
    "ORDER BY sequence DESC LIMIT 1"
)


def _check_replayed(captured: Any, replayed: Any) -> None:
    if captured is None or tuple(captured) != tuple(replayed or ()):
        raise RuntimeError(
            f"the replay did not end where the capture did: {replayed} != {captured}"
        )


# -- the report ----------------------------------------------------------------------------


def _part(medians: list[float], kind: str) -> float:
    """The medians of the phases of ``kind``, summed."""
    return sum(m for m, (_phase, k) in zip(medians, _PHASES, strict=True) if k == kind)


def report(timelines: list[list[float]], one_tx: float, two_tx: float, replayed: float) -> None:
    medians = [statistics.median(step[i] for step in timelines) for i in range(len(_PHASES))]
    totals = [sum(step) for step in timelines]
    total = statistics.median(totals)
    print(f"\nthe critical path of {len(timelines)} steps, median µs per phase")
    for number, ((phase, kind), value) in enumerate(zip(_PHASES, medians, strict=True), 1):
        print(f"  {number:>2}  {phase:<52} {kind:<9} {value:>7.0f}")
    print(f"      {'the step (median of the sums)':<52} {'':<9} {total:>7.0f}")
    print("\nby kind (medians per phase, summed; share of their sum)")
    summed = sum(medians)
    for kind in ("commit", "writer", "hand-off", "runtime"):
        part = _part(medians, kind)
        print(f"  {kind:<9} {part:>7.0f} µs  {part / summed:6.1%}")
    print("\nthe floors, measured in this run")
    print(f"  raw, 1 tx/step  {one_tx:>7.0f} µs   the step: {total / one_tx:5.2f}x")
    print(f"  raw, 2 tx/step  {two_tx:>7.0f} µs   the step: {total / two_tx:5.2f}x")
    print(
        f"  the step's SQL, replayed  {replayed:>7.0f} µs   the step: {total / replayed:5.2f}x;"
        f" it is {replayed / one_tx:.2f}x the 1-tx floor"
    )
    commits = _part(medians, "commit")
    print(
        f"  the step's two commits alone: {commits:.0f} µs = {commits / one_tx:.2f}x the "
        f"1-tx floor; what is left for the rest at 4x it: {4 * one_tx - commits:.0f} µs "
        f"(it takes {total - commits:.0f})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=500, help="steps timed")
    parser.add_argument("--database", metavar="URL", help="a PostgreSQL server's URL")
    parser.add_argument(
        "--postgres", action="store_true", help="on a throwaway PostgreSQL cluster started now"
    )
    args = parser.parse_args(argv)
    bench = _agent_step()
    load = os.getloadavg()
    print(
        f"one agent's step, hop by hop; load average {load[0]:.2f} {load[1]:.2f} "
        f"{load[2]:.2f}, {os.cpu_count()} CPUs"
    )
    with tempfile.TemporaryDirectory(prefix="agentkeep-timeline-") as directory:
        home = Path(directory)
        if not (args.database or args.postgres):
            print("SQLite, WAL + synchronous=FULL")
            one_tx, two_tx = sqlite_floors(bench, home, args.steps)
            replayed = sqlite_replay(home, args.steps)
            timelines = agentkeep_timeline(home / "agentkeep", args.steps, None)
        else:
            with bench._server(args.database) as server:
                print(server.settings())
                one_tx, two_tx = postgres_floors(bench, server, args.steps)
                replayed = postgres_replay(bench, server, home, args.steps)
                with server.schema() as schema:
                    url = bench._with_query(server.url, schema=schema)
                    timelines = agentkeep_timeline(home / "agentkeep", args.steps, url)
    report(timelines, one_tx, two_tx, replayed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
