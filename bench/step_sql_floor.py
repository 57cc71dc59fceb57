"""The data model's floor: a durable step's own SQL, replayed with nothing around it.

Issue 17's goal 3 asks 64 agents for ≥ 0.25x the group-commit floor's steps/s — a floor that
writes *one row* per step. agentkeep's step writes what the data model asks for (the turn,
its input key, the queue entry, the records, the owed inference, the ledger's events …),
and every write goes through the one writer connection, one statement after another. So no
runtime, however lean, can run more steps per second than that connection executes the
step's statements. This bench measures that bound, in one run next to the group-commit floor:

1. **capture**: a real ``AgentSystem`` runs ``--steps`` steps over ``--agents`` sessions, one
   at a time (round robin), with apsw's ``exec_trace`` recording every statement (and its
   bindings) the writer's connection executes, and a marker between steps;
2. **replay**: a fresh database in a fresh directory gets the writer's whole statement
   stream (pragmas, schema, setup untimed), then the measured steps' statements as they
   were, in one thread, with no actor, hand-off, Python bookkeeping or read around them —
   with the captured transactions (``as captured``) and then re-grouped into one
   transaction per 64 steps (``group commit``: the best case of a writer that commits 64
   agents' steps at once);
3. **baseline**: the group-commit floor of ``bench/agent_step.py`` (64 threads, one writer
   thread, one row per step), same run.

It prints steps/s and CPU µs per step of each, and the replay's ratio to the floor: the
ceiling goal 3's ratio can reach with today's data model on this machine's one writer
connection. Run: ``PYTHONPATH=src .venv/bin/python bench/step_sql_floor.py``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import apsw

import agentkeep as ak
from agentkeep.providers import script

_STEP = object()  # the marker between two steps in the captured stream
# Transaction control in the captured stream: kept as captured, dropped when re-grouped.
_CONTROL = ("BEGIN", "COMMIT", "END", "SAVEPOINT", "RELEASE")


@dataclass
class Capture:
    """The writer connection's statement stream: ``setup`` before the first measured step,
    then one list of ``(sql, bindings)`` per measured step."""

    setup: list[tuple[str, Any]]
    steps: list[list[tuple[str, Any]]]


def capture(home: Path, agents: int, steps: int) -> Capture:
    """Run ``steps`` steps, round robin over ``agents`` sessions, recording the writer's SQL."""
    streams: dict[int, list[Any]] = {}

    def hook(connection: apsw.Connection) -> None:
        stream: list[Any] = []
        streams[id(connection)] = stream

        def trace(_cursor: apsw.Cursor, sql: str, bindings: Any) -> bool:
            stream.append((sql, bindings))
            return True

        connection.exec_trace = trace

    model = ak.ScriptedModel([script.text("ok") for _ in range(agents + steps)], record=False)
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    apsw.connection_hooks.append(hook)
    try:
        with ak.AgentSystem.open(
            home, providers=providers, provider="local", model="gym-1"
        ) as system:
            handles = [system.create() for _ in range(agents)]
            for agent in handles:  # warm up: each session's first step, in the setup
                agent.send(ak.user("warm up"))
                agent.wait_for_idle(timeout_seconds=30)
            writer = _writer_stream(streams)
            writer.append(_STEP)
            for n in range(steps):
                agent = handles[n % agents]
                agent.send(ak.user(f"step {n}"))
                agent.wait_for_idle(timeout_seconds=30)
                writer.append(_STEP)
    finally:
        apsw.connection_hooks.remove(hook)
    cut = writer.index(_STEP)
    measured: list[list[tuple[str, Any]]] = [[]]
    for item in writer[cut + 1 :]:
        if item is _STEP:
            measured.append([])
        else:
            measured[-1].append(item)
    # Whatever the writer ran after the last step (passivation, closing) is not a step's.
    return Capture(setup=writer[:cut], steps=measured[:steps])


def _writer_stream(streams: dict[int, list[Any]]) -> list[Any]:
    """The stream of the connection that opened write transactions: the store's writer."""
    writers = [s for s in streams.values() if any(sql == "BEGIN IMMEDIATE" for sql, _ in s)]
    if len(writers) != 1:
        raise RuntimeError(f"expected one writer connection, found {len(writers)}")
    return writers[0]


@dataclass
class Replay:
    steps: int
    wall: float
    cpu: float
    statements: int

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.wall

    @property
    def cpu_us_per_step(self) -> float:
        return self.cpu / self.steps * 1e6


def replay(directory: Path, recorded: Capture, group: int | None) -> Replay:
    """Replay ``recorded`` into a fresh database: the setup untimed, then the steps — with
    their captured transactions (``group=None``) or one transaction per ``group`` steps."""
    connection = apsw.Connection(str(directory / "agents.db"))
    # An API setting, not a statement: the writer checkpoints by itself, never in COMMIT.
    connection.wal_autocheckpoint(0)
    try:
        for sql, bindings in recorded.setup:
            _run(connection, sql, bindings)
        if connection.in_transaction:
            raise RuntimeError("the setup ended inside a transaction")
        statements = 0
        wall, cpu = time.perf_counter(), time.process_time()
        for n, step in enumerate(recorded.steps):
            if group is not None and n % group == 0:
                _run(connection, "BEGIN IMMEDIATE", None)
            for sql, bindings in step:
                if group is not None and sql.lstrip().upper().startswith(_CONTROL):
                    continue
                _run(connection, sql, bindings)
                statements += 1
            if group is not None and (n % group == group - 1 or n == len(recorded.steps) - 1):
                _run(connection, "COMMIT", None)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        connection.close()
    return Replay(len(recorded.steps), wall, cpu, statements)


def _run(connection: apsw.Connection, sql: str, bindings: Any) -> None:
    if sql.lstrip().upper().startswith("ROLLBACK"):
        raise RuntimeError(f"a healthy step rolled back ({sql!r}): the capture is not clean")
    connection.execute(sql, bindings).fetchall()


def _agent_step() -> ModuleType:
    """``bench/agent_step.py``, for its group-commit floor (the same function, same run)."""
    path = Path(__file__).with_name("agent_step.py")
    spec = importlib.util.spec_from_file_location("agent_step", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["agent_step"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--agents", type=int, default=64, help="sessions (and floor threads)")
    parser.add_argument("--steps", type=int, default=1920, help="captured steps in all")
    parser.add_argument("--group", type=int, default=64, help="steps per re-grouped commit")
    args = parser.parse_args(argv)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"the data model's floor; load average {load}, {os.cpu_count()} CPUs\n")

    with tempfile.TemporaryDirectory(prefix="agentkeep-sql-floor-") as tmp:
        root = Path(tmp)
        (root / "system").mkdir()
        recorded = capture(root / "system", args.agents, args.steps)
        per_step = sum(len(s) for s in recorded.steps) / len(recorded.steps)
        commits = sum(1 for s in recorded.steps for sql, _ in s if sql.upper() == "COMMIT")
        print(
            f"captured: {len(recorded.steps)} steps over {args.agents} sessions, "
            f"{per_step:.1f} writer statements per step "
            f"({commits / len(recorded.steps):.1f} commits), "
            f"{len(recorded.setup)} setup statements"
        )
        runs: dict[str, Replay] = {}
        for name, group in (("as captured", None), (f"group commit x{args.group}", args.group)):
            directory = root / name.replace(" ", "-")
            directory.mkdir()
            runs[name] = replay(directory, recorded, group)
        floor_home = root / "floor"
        floor_home.mkdir()
        floor = _agent_step().apsw_group_commit_steps(
            floor_home, args.agents, max(1, args.steps // args.agents)
        )

    print(f"\n{'':34}{'steps/s':>10}{'CPU µs/step':>14}")
    print(
        f"  {'apsw group commit (1 row/step)':32}{floor.steps_per_second:>10.0f}"
        f"{floor.cpu_us_per_step:>14.0f}"
    )
    for name, run in runs.items():
        ratio = run.steps_per_second / floor.steps_per_second
        print(
            f"  {'replay, ' + name:32}{run.steps_per_second:>10.0f}{run.cpu_us_per_step:>14.0f}"
            f"   {ratio:.2f}x the group-commit floor"
        )
    best = max(runs.values(), key=lambda r: r.steps_per_second)
    print(
        f"\nthe writer connection alone, doing only a step's SQL, reaches "
        f"{best.steps_per_second / floor.steps_per_second:.2f}x the group-commit floor "
        f"(goal 3 asks >= 0.25x of the whole runtime)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
