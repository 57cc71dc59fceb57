"""Durable agent steps per second, agentkeep against LangGraph and DBOS measured in the same run.

One *step*: accept a user message durably, consume it into the conversation, run one
zero-latency inference answering with one text block, persist it, settle. Every engine runs on
SQLite with synchronous=FULL (agentkeep's default; LangGraph's SqliteSaver and DBOS are set to
it explicitly) in a fresh temporary directory.

Run: ``.venv/bin/python bench/agent_step.py [--steps N] [--agents 64]``. The baselines need the
``bench`` dependency group (``pip install --group bench``); a missing one is reported, not faked.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import agentkeep as ak
from agentkeep.providers import script


def agentkeep_steps(home: Path, *, agents: int, steps: int) -> list[float]:
    """Per-step latencies (seconds) with ``agents`` agents stepping concurrently."""
    model = ak.ScriptedModel([script.text("ok") for _ in range(agents * steps + agents)])
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    latencies: list[float] = []
    lock = threading.Lock()
    with ak.AgentSystem.open(home, providers=providers, provider="local", model="gym-1") as system:
        handles = [system.create() for _ in range(agents)]
        for agent in handles:  # warm up: actor, session, statement cache
            agent.send(ak.user("warm up"))
            agent.wait_for_idle(timeout_seconds=30)

        def run(agent: ak.Agent) -> None:
            mine = []
            for n in range(steps):
                started = time.perf_counter()
                agent.send(ak.user(f"step {n}"))
                agent.wait_for_idle(timeout_seconds=30)
                mine.append(time.perf_counter() - started)
            with lock:
                latencies.extend(mine)

        _run_threads([lambda a=a: run(a) for a in handles])
    return latencies


def langgraph_steps(home: Path, *, agents: int, steps: int) -> list[float] | str:
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
    saver = SqliteSaver(connection)
    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_edge(START, "model")
    builder.add_edge("model", END)
    graph = builder.compile(checkpointer=saver)
    latencies: list[float] = []
    lock = threading.Lock()

    def run(thread: int) -> None:
        config = {"configurable": {"thread_id": f"agent-{thread}"}}
        graph.invoke({"messages": [("user", "warm up")]}, config)
        mine = []
        for n in range(steps):
            started = time.perf_counter()
            graph.invoke({"messages": [("user", f"step {n}")]}, config)
            mine.append(time.perf_counter() - started)
        with lock:
            latencies.extend(mine)

    _run_threads([lambda t=t: run(t) for t in range(agents)])
    connection.close()
    return latencies


def dbos_steps(home: Path, *, agents: int, steps: int) -> list[float] | str:
    try:
        from dbos import DBOS, DBOSConfig
    except ImportError as error:
        return f"not installed ({error.name})"
    import logging

    logging.getLogger("dbos").setLevel(logging.ERROR)
    config: DBOSConfig = {
        "name": "agentstep",
        "system_database_url": f"sqlite:///{home / 'dbos.sqlite'}",
        "run_admin_server": False,
    }
    DBOS(config=config)

    @DBOS.step()
    def infer(text: str) -> str:
        return "ok"

    @DBOS.workflow()
    def turn(text: str) -> str:
        return infer(text)

    DBOS.launch()
    try:
        latencies: list[float] = []
        lock = threading.Lock()

        def run(thread: int) -> None:
            turn("warm up")
            mine = []
            for n in range(steps):
                started = time.perf_counter()
                turn(f"agent {thread} step {n}")
                mine.append(time.perf_counter() - started)
            with lock:
                latencies.extend(mine)

        _run_threads([lambda t=t: run(t) for t in range(agents)])
        return latencies
    finally:
        DBOS.destroy(destroy_registry=True)


def _run_threads(work: list[Callable[[], None]]) -> None:
    threads = [threading.Thread(target=w) for w in work]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _summary(name: str, agents: int, latencies: list[float] | str, wall: float) -> float | None:
    if isinstance(latencies, str):
        print(f"  {name:<22} {agents:>3} agents  {latencies}")
        return None
    count = len(latencies)
    ordered = sorted(latencies)
    per_step_us = wall / count * 1e6  # wall time per completed step, all agents together
    p50 = statistics.median(ordered) * 1e6
    p99 = ordered[min(count - 1, int(count * 0.99))] * 1e6
    print(
        f"  {name:<22} {agents:>3} agents  {count / wall:>9.0f} steps/s  "
        f"{per_step_us:>8.0f} µs/step  p50 {p50:>8.0f} µs  p99 {p99:>8.0f} µs"
    )
    return per_step_us


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="steps per agent")
    parser.add_argument("--agents", type=int, default=64, help="agents in the concurrent run")
    args = parser.parse_args()
    engines: dict[str, Callable[..., list[float] | str]] = {
        "agentkeep": agentkeep_steps,
        "langgraph+SqliteSaver": langgraph_steps,
        "dbos (sqlite)": dbos_steps,
    }
    print(f"durable agent steps, synchronous=FULL, {args.steps} steps per agent")
    for agents in (1, args.agents):
        steps = args.steps if agents == 1 else max(10, args.steps // 10)
        results: dict[str, float | None] = {}
        for name, engine in engines.items():
            with tempfile.TemporaryDirectory() as directory:
                started = time.perf_counter()
                latencies = engine(Path(directory), agents=agents, steps=steps)
                wall = time.perf_counter() - started
                results[name] = _summary(name, agents, latencies, wall)
        ours = results["agentkeep"]
        for name, theirs in results.items():
            if name != "agentkeep" and theirs and ours:
                print(f"    {name} / agentkeep µs per step: {theirs / ours:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
