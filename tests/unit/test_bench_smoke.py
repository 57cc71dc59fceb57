"""The benchmarks run (briefly) and print every figure. Each reaches the runtime from the
outside — ``step_anatomy`` hooks an internal method, ``queue_backlog`` holds an agent
mid-response through a scripted model — so a change there would otherwise rot it silently."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _on_sqlite(name: str, args: list[str]) -> str:
    """What ``bench/NAME.py ARGS`` prints, run as a process of its own on SQLite whatever the
    suite's backend: for a benchmark whose subject is SQLite's (its pages, apsw's statements).
    The PostgreSQL pass puts its children's stores on the server (``tests/pg_children``):
    none of that reaches this one."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("AGENTKEEP_DATABASE", "AGENTKEEP_TEST_STORES", "PYTHONPATH")
    }
    env["AGENTKEEP_TEST_DATABASE"] = "sqlite"
    done = subprocess.run(
        [sys.executable, str(BENCH / f"{name}.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_step_anatomy_reports_every_section() -> None:
    # SQLite's by design: a step's pages in the WAL, the writer's time inside apsw's calls.
    out = _on_sqlite("step_anatomy", ["--steps", "6", "--agents", "3", "--agent-steps", "4"])
    assert "store writer" in out
    assert "agent actors" in out
    commit = re.search(r"COMMIT\s+([\d.]+)", out)
    assert commit is not None
    assert float(commit.group(1)) > 0
    pages = re.findall(r"transaction (\d): +(\d+) pages", out)
    assert [n for n, _ in pages] == ["1", "2"]
    assert all(int(p) > 0 for _, p in pages)
    assert re.search(r"[\d.]+ cores busy", out)


def test_queue_backlog_reports_send_and_drain(capsys: pytest.CaptureFixture[str]) -> None:
    module = _load("queue_backlog")

    assert module.main(["--messages", "40", "--steps", "5"]) == 0

    out = capsys.readouterr().out
    assert "send, first tenth" in out
    assert "send, last tenth" in out
    assert "drain:" in out


def test_step_sql_floor_replays_the_captured_step_against_the_floor() -> None:
    # SQLite's by design: the writer's statements captured from apsw, replayed on raw apsw.
    out = _on_sqlite("step_sql_floor", ["--agents", "3", "--steps", "9", "--group", "3"])
    captured = re.search(r"captured: 9 steps over 3 sessions, ([\d.]+) writer statements", out)
    assert captured is not None
    assert float(captured.group(1)) > 5  # a step writes its turn, records, queue, ledger …
    assert "apsw group commit (1 row/step)" in out
    assert re.search(r"replay, as captured +\d+ +\d+ +[\d.]+x", out)
    assert re.search(r"replay, group commit x3 +\d+ +\d+ +[\d.]+x", out)


def _assert_timeline(out: str) -> None:
    phases = re.findall(r"^ +(\d+)  .+ (runtime|hand-off|writer|commit) +(\d+)$", out, re.M)
    assert [int(n) for n, _kind, _us in phases] == list(range(1, 15))
    assert sum(int(us) for _n, _kind, us in phases) > 0
    for kind in ("commit", "writer", "hand-off", "runtime"):
        assert re.search(rf"^  {kind} +\d+ µs +[\d.]+%$", out, re.M)
    for floor in ("raw, 1 tx/step", "raw, 2 tx/step"):
        assert re.search(rf"{floor} +\d+ µs   the step: +[\d.]+x", out)
    assert re.search(r"the step's SQL, replayed +\d+ µs   the step: +[\d.]+x; it is", out)
    assert re.search(r"the step's two commits alone: \d+ µs = [\d.]+x the 1-tx floor", out)


def test_step_timeline_follows_a_step_hop_by_hop_against_its_floors() -> None:
    # On SQLite whatever the pass: its replay runs the captured statements on raw apsw.
    out = _on_sqlite("step_timeline", ["--steps", "6"])
    assert "SQLite, WAL + synchronous=FULL" in out
    _assert_timeline(out)


def test_step_timeline_on_postgres_replays_the_steps_sql_on_the_server(
    capsys: pytest.CaptureFixture[str], postgres_server: str
) -> None:
    module = _load("step_timeline")

    assert module.main(["--database", postgres_server, "--steps", "6"]) == 0

    out = capsys.readouterr().out
    assert re.search(r"^PostgreSQL .*synchronous_commit=on", out, re.M)
    _assert_timeline(out)


def test_saturation_reports_every_figure(capsys: pytest.CaptureFixture[str]) -> None:
    module = _load("saturation")

    assert module.main(["--seconds", "0.5", "--clients", "3", "5"]) == 0

    out = capsys.readouterr().out
    figures = r" +[\d.]+ {}/s +p50 +[\d.]+ ms +p99 +[\d.]+ ms +refusals +\d+ +threads +\d+"
    assert re.search(r"bare Starlette route, 3 clients" + figures.format("requests"), out)
    assert re.search(r"POST messages wait=false, 3" + figures.format("requests"), out)
    assert re.search(r"turns, wait=true, 3 clients" + figures.format("turns"), out)
    assert re.search(r"turns, wait=true, 5 clients" + figures.format("turns"), out)
    assert re.search(r"turns in-process, 3 threads +[\d.]+ turns/s", out)
    assert re.search(r"wait=false vs a bare Starlette route: [\d.]+x", out)
    assert re.search(r"5 vs 3 clients: [\d.]+x", out)
    assert re.search(r"daemon at 3 clients vs in-process: [\d.]+x", out)


def test_worker_hop_reports_both_pools_and_the_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    module = _load("worker_hop")

    assert module.main(["--hops", "200", "--callers", "10"]) == 0

    out = capsys.readouterr().out
    assert re.search(r"server.workers.run_sync +[\d.]+ us CPU a hop", out)
    assert re.search(r"starlette run_in_threadpool +[\d.]+ us CPU a hop", out)
    assert re.search(r"the pool vs AnyIO's: [\d.]+x", out)


def test_tracing_reports_off_noop_and_on_per_step(capsys: pytest.CaptureFixture[str]) -> None:
    module = _load("tracing")

    assert module.main(["--steps", "4", "--rounds", "1"]) == 0

    out = capsys.readouterr().out
    for label in ("step", "tool step"):
        assert f"\n{label}: CPU µs per {label}, 4 steps" in out
    row = r"  {} +[\d.]+ µs +[\d.]+x off +spans/step +([\d.]+)"
    assert re.search(row.format("off"), out)
    assert re.search(row.format("API no-op"), out)
    on = re.findall(row.format(r"on \(SDK, batch\)"), out)
    assert len(on) == 2
    assert all(float(spans) >= 3 for spans in on)  # a turn, a request, commits at least


@pytest.mark.slow  # four engines on a server, DBOS's launch and teardown: ~20 s on 2 cores
def test_agent_step_on_postgres_reports_every_contender_against_the_floor(
    capsys: pytest.CaptureFixture[str], postgres_server: str
) -> None:
    """The PostgreSQL mode on the harness's server (skipped on the SQLite pass): each
    contender on its own schema, each figure and ratio printed; a peer whose package is not
    installed (the ``bench`` group is not the tests') says so instead of a figure."""
    module = _load("agent_step")

    argv = ["--database", postgres_server, "--steps", "4", "--agents", "2", "--agent-steps", "2"]
    assert module.main([*argv, "--history", "20"]) == 0

    out = capsys.readouterr().out
    header = r"durable agent steps on PostgreSQL .*synchronous_commit=on.*; load average"
    assert re.search(header, out)
    figures = r" +\d+ / +\d+  CPU +\d+ µs +\d+ steps/s"
    assert re.search(r"psycopg, 1 tx/step" + figures + r" +\(the floor\)", out)
    assert re.search(r"agentkeep" + figures + r" +median +[\d.]+x  \(goal <= 4x\)", out)
    for peer in ("langgraph \\(postgres, sync\\)", "dbos \\(postgres\\)"):
        lines = re.findall(peer + r" +(.*)", out)
        assert len(lines) == 2  # the 1-agent and the many-agent run
        assert all(re.search(r"[\d.]+x agentkeep$|^not installed \(", line) for line in lines)
    many = r" +\d+ steps/s  CPU +\d+ µs  median +\d+ µs"
    assert re.search(r"psycopg group commit" + many, out)
    assert re.search(r"agentkeep" + many + r" +[\d.]+x  \(goal >= 0.25x\) the group-commit", out)
    history = r"agentkeep  steps 1-2: \d+   steps 19-20: \d+ +[\d.]+x  \(goal <= 1.2x\)"
    assert re.search(history, out)
    size = r"bytes in the schema \(tables, indexes, TOAST\): [\d,]+; [\d,]+ per step"
    assert re.search(size, out)
    assert "load average at the end" in out


@pytest.mark.slow  # worker processes, each importing agentkeep and opening its partitions
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_scale_out_reports_workers_against_one_worker_and_the_floor(
    capsys: pytest.CaptureFixture[str], postgres_server: str
) -> None:
    """The harness's server (skipped on the SQLite pass): 2 agents over 2 partitions, run
    by 1 then 2 worker processes; every figure printed, the server's CPU read from /proc
    (the server is on this machine), the ratios to one worker and the cores' accounting."""
    module = _load("scale_out")

    argv = ["--database", postgres_server, "--agents", "2", "--partitions", "2"]
    assert module.main([*argv, "--workers", "1", "2", "--steps", "2"]) == 0

    out = capsys.readouterr().out
    assert re.search(r"scale-out on PostgreSQL .*synchronous_commit=on.*; 2 partitions; ", out)
    assert re.search(r"\d+ cores \(\d+ usable\), load average [\d.]+ [\d.]+ [\d.]+", out)
    assert "a call to echo" in out  # a tool step by default
    figures = r" +\d+ steps/s  runtime +\d+ µs  server +\d+ µs  median +\d+ µs"
    assert re.search(r"psycopg group commit" + figures, out)
    assert re.search(r"psycopg, 2 committers" + figures, out)
    cores = r"cores: runtime [\d.]+, server [\d.]+, others [\d.]+"
    for label in ("1 worker ", "2 workers"):
        row = label + figures + r"  [\d.]+x the group-commit floor  " + cores
        assert re.search(row, out), label
    ratios = r"vs 1 worker: steps/s [\d.]+x \(goal >= 1.6x\)  runtime CPU/step [\d.]+x"
    # One worker's server may have used no clock tick of CPU in so short a run: no ratio.
    server = r"server CPU/step ([\d.]+x|n/a \(no tick\))"
    assert re.search(ratios + r" \(goal <= 1.2x\)  " + server, out)
    allowed = r"runtime \+ server \d+ µs of CPU a step: .* allow \d+ steps/s"
    assert len(re.findall(allowed, out)) == 2
    assert "load average at the end" in out
