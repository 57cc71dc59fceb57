"""Throughput over worker processes: one PostgreSQL store's partitions over 1, 2, 4 workers.

A *worker* is one process running its share of the store's partitions (``--partitions``, 16
by default): one ``AgentSystem.open(home, database=url, partition=Partition(i, n))`` for each
partition it owns, opened directly (no coordinator: the spreading is fixed, worker ``k`` owns
the partitions ``i`` with ``i % workers == k``). Every partition holds the same number of
agents (created by its own system, so their ids hash there).

One *step* is a tool step, durable: accept a user message, one inference calling the tool
``echo`` (the deterministic local model, ``RespondingModel``, answers a user message with a
tool call and a tool result with a text), run the call, persist its result, a second
inference answering with a text, settle. Every agent steps in its own thread of its worker
(send, then wait until idle), ``--steps`` times. Only the steps are timed: the workers open
their systems, create and warm up their agents (one step each), report ready, and all start
together on one signal.

Figures per run (``--agents`` x ``--workers``, a fresh schema each):

- steps/s: every worker's steps over the wall time from the start signal to the last
  worker's last step;
- CPU µs per step, **runtime**: the worker processes' CPU (every thread, each over its own
  timed region) over all steps; **server**: the PostgreSQL server's processes (the
  postmaster's children, backends and WAL writer, alive or exited since: read from
  ``/proc``) over the same window; shown only for a server on this machine;
- the ratio to one worker's steps/s [goal >= 1.6x for 2 workers, when the cores allow] and
  CPU per step [goal <= 1.2x];
- who took the cores during the window: the runtime's processes, the server's, and the rest
  of the machine (``/proc/stat``'s busy time minus both: other users' processes).

The floors, measured in the same run on the same server (``bench/agent_step.py``'s): raw
psycopg writing two rows a step, ``group commit`` (one writer connection commits all that
waits in one transaction) and ``N concurrent committers`` (one connection each, one
transaction a step: the server's WAL flush combines their commits; N is the agents, at
most ``--committers``, 128). A floor's server CPU counts its connecting and warm-up too: an
upper bound.

Sessions: each partition's system holds a writer session and opens a reader session per
concurrent read (kept for reuse), so 256 agents need more than the 200 ``max_connections``
of ``scripts/postgres_cluster.py``: the throwaway cluster is restarted with
``--max-connections`` (1000) before the run; a server given by ``--database`` must allow
about as many sessions as agents plus partitions.

Run: ``.venv/bin/python bench/scale_out.py`` (a short run: 64 agents, 1 and 2 workers, on a
throwaway cluster started with ``scripts/postgres_cluster.py`` and removed at the end);
``--full`` for the issue's run (64 and 256 agents over 1, 2 and 4 workers); or choose with
``--agents 64 256 --workers 1 2 4 --steps 20``; ``--database URL`` runs on a given server
instead (each run on a fresh schema, dropped afterwards).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import msgspec

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.providers.responding import RespondingModel

_BENCH = Path(__file__).resolve().parent
_PROTOCOL = "@scale_out "  # the prefix of a worker's protocol lines on its stdout


def _load_agent_step() -> ModuleType:
    """``bench/agent_step.py``: the server, its throwaway cluster and the floors."""
    name = "agent_step"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, _BENCH / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


# -- a worker process -------------------------------------------------------------------------


class _EchoArgs(msgspec.Struct):
    call: str


@ak.tool
def echo(ctx: ak.ToolContext, args: _EchoArgs) -> str:
    """Echo the call id back."""
    return args.call


def _say(kind: str, **fields: object) -> None:
    print(_PROTOCOL + json.dumps({"kind": kind, **fields}), flush=True)


def _worker(spec: dict[str, object]) -> int:
    """Open this worker's partitions' systems, make and warm up their agents, say ready, run
    the steps on ``go``, say done with the figures, close on ``stop``."""
    url = str(spec["url"])
    count = int(spec["count"])  # type: ignore[call-overload]
    partitions = [int(p) for p in spec["partitions"]]  # type: ignore[attr-defined]
    per_partition = int(spec["per_partition"])  # type: ignore[call-overload]
    steps = int(spec["steps"])  # type: ignore[call-overload]
    home = Path(str(spec["home"]))
    if not spec.get("notify", True):  # --no-notify: the writers send no pg_notify
        from agentkeep.persistence.postgres import store as pg_store

        pg_store.ledger_channel = lambda oid, partition: None  # type: ignore[assignment,return-value]
    providers = ak.Providers()
    if spec.get("text"):  # agent_step's step: one inference answering with a text
        answers = [script.text("ok") for _ in range(len(partitions) * per_partition * (steps + 1))]
        providers.add("local", ak.ScriptedModel(answers, record=False), kind="gym")
    else:
        # usage_events=False: no token-usage event; every answer is a pure function of the
        # conversation (a user message: a call to echo; a tool result: a text).
        model = RespondingModel(durable_tool="echo", fragile_tool="echo", usage_events=False)
        providers.add("local", model, kind="gym")
    systems: list[ak.AgentSystem] = []
    try:
        for index in partitions:
            systems.append(
                ak.AgentSystem.open(
                    home,
                    providers=providers,
                    provider="local",
                    model="gym-1",
                    tools=[echo],
                    database=url,
                    partition=ak.Partition(index=index, count=count),
                )
            )
        agents = [system.create() for system in systems for _ in range(per_partition)]
        for agent in agents:  # warm up (untimed): actor, session, statement cache
            agent.send(ak.user("warm up"))
        for agent in agents:
            agent.wait_for_idle(timeout_seconds=120)
        _say("ready", agents=len(agents), systems=len(systems))
        if sys.stdin.readline().strip() != "go":
            return 1
        latencies: list[list[float]] = [[] for _ in agents]
        start = threading.Barrier(len(agents) + 1)
        failures: list[BaseException] = []

        def work(n: int) -> None:
            agent, mine = agents[n], latencies[n]
            start.wait()
            try:
                for step in range(steps):
                    began = time.perf_counter()
                    agent.send(ak.user(f"step {step}"))
                    agent.wait_for_idle(timeout_seconds=120)
                    mine.append(time.perf_counter() - began)
            except BaseException as error:  # reported, not swallowed: the bench fails
                failures.append(error)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(len(agents))]
        for thread in threads:
            thread.start()
        wall, cpu = time.perf_counter(), time.process_time()
        start.wait()
        for thread in threads:
            thread.join()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if failures:
            _say("failed", error=repr(failures[0]))
            return 1
        every = [x for mine in latencies for x in mine]
        _say(
            "done",
            steps=len(every),
            wall=wall,
            cpu=cpu,
            median=statistics.median(every),
        )
        sys.stdin.readline()  # "stop": close only once every worker is done
        return 0
    finally:
        for system in reversed(systems):
            system.close()


# -- CPU accounting from /proc ----------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()  # fields from the 3rd (state) on


class ServerCpu:
    """The PostgreSQL server's CPU seconds so far: the postmaster's own and its exited
    children's (utime, stime, cutime, cstime), plus every live child's (backends, WAL
    writer, checkpointer …). ``None`` when the server is not on this machine."""

    def __init__(self, url: str) -> None:
        import psycopg

        with psycopg.connect(url, autocommit=True) as probe:
            row = probe.execute("SELECT pg_backend_pid()").fetchone()
            assert row is not None
            # Read while the probe's backend lives: it exits when the connection closes, and
            # a backend gone before its /proc entry was read left the server's CPU "n/a".
            fields = _stat_fields(int(row[0]))
        self.postmaster = int(fields[1]) if fields is not None else None

    def seconds(self) -> float | None:
        if self.postmaster is None:
            return None
        own = _stat_fields(self.postmaster)
        if own is None:
            return None
        ticks = sum(int(x) for x in own[11:15])  # utime stime cutime cstime
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            fields = _stat_fields(int(entry.name))
            if fields is not None and fields[1] == str(self.postmaster):
                ticks += int(fields[11]) + int(fields[12])
        return ticks / _TICK


def _machine_busy() -> float | None:
    """CPU seconds every core spent busy so far (``/proc/stat``: all but idle and iowait)."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except OSError:
        return None
    values = [int(x) for x in first[1:]]
    return (sum(values[:8]) - values[3] - values[4]) / _TICK


@dataclass
class Window:
    """One timed window: wall seconds, steps, and CPU seconds by whom."""

    wall: float
    steps: int
    runtime_cpu: float
    server_cpu: float | None
    machine_busy: float | None
    median: float = 0.0

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.wall

    def per_step_us(self, seconds: float | None) -> float | None:
        return None if seconds is None else seconds / self.steps * 1e6

    def cores(self) -> str:
        runtime = self.runtime_cpu / self.wall
        text = f"cores: runtime {runtime:.2f}"
        if self.server_cpu is not None:
            text += f", server {self.server_cpu / self.wall:.2f}"
        if self.machine_busy is not None:
            others = (self.machine_busy - self.runtime_cpu - (self.server_cpu or 0)) / self.wall
            text += f", others {max(others, 0.0):.2f}"
        return text


@contextlib.contextmanager
def _window(server: ServerCpu) -> Iterator[list[float | None]]:
    """Yields a list filled on exit with the server's CPU and the machine's busy seconds."""
    out: list[float | None] = []
    server_before, busy_before = server.seconds(), _machine_busy()
    yield out
    server_after, busy_after = server.seconds(), _machine_busy()
    out.append(
        None if server_before is None or server_after is None else server_after - server_before
    )
    out.append(None if busy_before is None or busy_after is None else busy_after - busy_before)


# -- one run: W worker processes ----------------------------------------------------------------


def _workers_run(
    url: str,
    server: ServerCpu,
    workers: int,
    count: int,
    agents: int,
    steps: int,
    scratch: Path,
    *,
    text: bool,
    notify: bool = True,
) -> Window:
    per_partition = agents // count
    env = dict(os.environ)
    source = str(_BENCH.parent / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (source, env.get("PYTHONPATH")) if p)
    children: list[subprocess.Popen[str]] = []
    try:
        for k in range(workers):
            spec = {
                "url": url,
                "count": count,
                "partitions": [i for i in range(count) if i % workers == k],
                "per_partition": per_partition,
                "steps": steps,
                "home": str(scratch / f"w{workers}-{k}"),
                "text": text,
                "notify": notify,
            }
            children.append(
                subprocess.Popen(
                    [sys.executable, __file__, "--worker", json.dumps(spec)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                    env=env,
                )
            )
        for child in children:
            _expect(child, "ready")
        with _window(server) as measured:
            began = time.perf_counter()
            for child in children:
                assert child.stdin is not None
                child.stdin.write("go\n")
                child.stdin.flush()
            done = [_expect(child, "done") for child in children]
            wall = time.perf_counter() - began
        for child in children:
            assert child.stdin is not None
            child.stdin.write("stop\n")
            child.stdin.flush()
        for child in children:
            if child.wait(timeout=120) != 0:
                raise RuntimeError(f"a worker exited with {child.returncode}")
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
            for stream in (child.stdin, child.stdout):
                if stream is not None:
                    stream.close()
    total = sum(int(d["steps"]) for d in done)
    return Window(
        wall=wall,
        steps=total,
        runtime_cpu=sum(float(d["cpu"]) for d in done),
        server_cpu=measured[0],
        machine_busy=measured[1],
        median=statistics.median(float(d["median"]) for d in done),
    )


def _expect(child: subprocess.Popen[str], kind: str) -> dict[str, object]:
    assert child.stdout is not None
    for line in child.stdout:
        if not line.startswith(_PROTOCOL):
            continue
        message: dict[str, object] = json.loads(line[len(_PROTOCOL) :])
        if message["kind"] != kind:
            raise RuntimeError(f"a worker said {message} (expected {kind})")
        return message
    raise RuntimeError(f"a worker exited (code {child.wait()}) before saying {kind}")


# -- the floors --------------------------------------------------------------------------------


def _floor(cpu: ServerCpu, engine: object, n: int, steps: int) -> Window:
    with tempfile.TemporaryDirectory() as directory, _window(cpu) as measured:
        run = engine(Path(directory), n, steps)  # type: ignore[operator]
    # The window includes the engine's setup (connecting, the table, a warm-up step) on the
    # server's side: its server CPU per step is an upper bound.
    return Window(
        wall=run.wall,
        steps=len(run.latencies),
        runtime_cpu=run.cpu,
        server_cpu=measured[0],
        machine_busy=None,
        median=statistics.median(run.latencies),
    )


# -- the report ----------------------------------------------------------------------------------


def _us(value: float | None) -> str:
    return "   n/a" if value is None else f"{value:6.0f}"


def _row(name: str, window: Window) -> str:
    runtime = window.per_step_us(window.runtime_cpu)
    server = window.per_step_us(window.server_cpu)
    return (
        f"  {name:<28} {window.steps_per_second:>8.0f} steps/s  runtime {_us(runtime)} µs"
        f"  server {_us(server)} µs  median {window.median * 1e6:>7.0f} µs"
    )


def _agents_run(
    agent_step: ModuleType, server: object, args: argparse.Namespace, agents: int, scratch: Path
) -> None:
    url_of = agent_step._with_query
    cpu = ServerCpu(server.url)  # type: ignore[attr-defined]
    committers = min(agents, args.committers)
    print(
        f"\n{agents} agents ({agents // args.partitions} a partition), {args.steps} steps each: "
        "steps/s, CPU µs per step (runtime, server), median µs per step"
    )
    floors = (
        ("psycopg group commit", agent_step.psycopg_group_commit(server), agents),
        (f"psycopg, {committers} committers", agent_step.psycopg_one_tx(server), committers),
    )
    base = 0.0
    for name, engine, n in floors:
        floor = _floor(cpu, engine, n, args.steps)
        base = base or floor.steps_per_second
        print(_row(name, floor))
    one: Window | None = None
    for workers in args.workers:
        with server.schema() as schema:  # type: ignore[attr-defined]
            url = url_of(server.url, schema=schema)  # type: ignore[attr-defined]
            run = _workers_run(
                url,
                cpu,
                workers,
                args.partitions,
                agents,
                args.steps,
                scratch,
                text=args.text,
                notify=not args.no_notify,
            )
        one = one or run
        label = f"{workers} worker{'s' if workers > 1 else ''}"
        runtime_us = run.per_step_us(run.runtime_cpu)
        server_us = run.per_step_us(run.server_cpu)
        print(
            f"{_row(label, run)}  {run.steps_per_second / base:.3f}x the group-commit floor  "
            f"{run.cores()}"
        )
        if run.server_cpu is not None:
            each = (run.runtime_cpu + run.server_cpu) / run.steps
            print(
                f"    runtime + server {each * 1e6:.0f} µs of CPU a step: this machine's "
                f"{os.cpu_count()} cores, all ours, would allow {(os.cpu_count() or 1) / each:.0f} "
                "steps/s"
            )
        if workers > 1:
            goal = " (goal >= 1.6x)" if workers == 2 else ""
            one_runtime = one.per_step_us(one.runtime_cpu)
            one_server = one.per_step_us(one.server_cpu)
            text = (
                f"    vs 1 worker: steps/s {run.steps_per_second / one.steps_per_second:.2f}x"
                f"{goal}  runtime CPU/step {(runtime_us or 0) / (one_runtime or 1):.2f}x"
                " (goal <= 1.2x)"
            )
            if server_us is not None and one_server is not None:
                # /proc counts CPU in clock ticks (10 ms): a short run's server may show none.
                ratio = f"{server_us / one_server:.2f}x" if one_server else "n/a (no tick)"
                text += f"  server CPU/step {ratio}"
            print(text)


@contextlib.contextmanager
def _server(agent_step: ModuleType, url: str | None, connections: int) -> Iterator[object]:
    """The given server, or a throwaway cluster allowing ``connections`` sessions, started
    now and removed on exit. Every partition's system holds a writer session and opens a
    reader session per concurrent read (kept idle for reuse): 256 agents stepping at once
    need more than the cluster script's 200."""
    if url:
        yield agent_step.Server(url)
        return
    import shutil

    import psycopg

    script = agent_step._cluster_script()
    directory = Path(tempfile.mkdtemp(prefix="agentkeep-bench-pg-"))
    try:
        first = script.start(directory, timeout=60)
        with psycopg.connect(first, autocommit=True) as admin:
            admin.execute(f"ALTER SYSTEM SET max_connections = {int(connections)}")  # type: ignore[arg-type]
        script.stop(directory)  # max_connections takes a restart
        yield agent_step.Server(script.start(directory, timeout=60))
    finally:
        with contextlib.suppress(Exception):
            script.stop(directory)
        shutil.rmtree(directory, ignore_errors=True)


def _max_connections(server: object) -> str:
    import psycopg

    with psycopg.connect(server.url, autocommit=True) as admin:  # type: ignore[attr-defined]
        row = admin.execute("SELECT current_setting('max_connections')").fetchone()
    assert row is not None
    return str(row[0])


def _cores() -> str:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{os.cpu_count()} cores ({usable} usable)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--agents", type=int, nargs="+", help="agent counts (default 64)")
    parser.add_argument("--workers", type=int, nargs="+", help="worker counts (default 1 2)")
    parser.add_argument("--steps", type=int, help="steps per agent (default 10; --full 20)")
    parser.add_argument("--partitions", type=int, default=16, help="the store's partitions")
    parser.add_argument(
        "--committers", type=int, default=128, help="most concurrent committers of the floor"
    )
    parser.add_argument(
        "--text",
        action="store_true",
        help="agent_step's text step (one inference, no tool) instead of a tool step",
    )
    parser.add_argument(
        "--full", action="store_true", help="64 and 256 agents over 1, 2 and 4 workers"
    )
    parser.add_argument("--database", metavar="URL", help="a PostgreSQL server (else a throwaway)")
    parser.add_argument(
        "--max-connections",
        type=int,
        default=1000,
        help="the throwaway cluster's max_connections (256 agents need more than 200)",
    )
    parser.add_argument(
        "--no-notify",
        action="store_true",
        help="the partitions' writers send no NOTIFY on commit (to measure what it costs)",
    )
    parser.add_argument("--worker", metavar="JSON", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return _worker(json.loads(args.worker))
    args.agents = args.agents or ([64, 256] if args.full else [64])
    args.workers = args.workers or ([1, 2, 4] if args.full else [1, 2])
    args.steps = args.steps or (20 if args.full else 10)
    for agents in args.agents:
        if agents % args.partitions:
            parser.error(f"--agents {agents} is not a multiple of --partitions {args.partitions}")
    for workers in args.workers:
        if not 1 <= workers <= args.partitions:
            parser.error(f"--workers {workers}: from 1 to --partitions ({args.partitions})")
    agent_step = _load_agent_step()
    load = os.getloadavg()
    with (
        _server(agent_step, args.database, args.max_connections) as server,
        tempfile.TemporaryDirectory(prefix="agentkeep-scale-out-") as scratch,
    ):
        print(
            f"scale-out on PostgreSQL ({server.settings()}, "
            f"max_connections={_max_connections(server)}); {args.partitions} partitions; "
            f"{_cores()}, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
        )
        step = (
            "a user message, a text answer"
            if args.text
            else "a user message, a call to echo, its result, a text answer"
        )
        print(f"a step (durable): {step}; a floor's step: 2 rows")
        for agents in args.agents:
            _agents_run(agent_step, server, args, agents, Path(scratch))
        load = os.getloadavg()
        print(f"\nload average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
