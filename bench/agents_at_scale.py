"""Agents at scale: memory per live agent actor, per passivated agent, and time to open.

- Memory per *live* agent: agents whose actor is running (idle, not yet passivated).
- Memory per *passivated* agent: created agents without an actor (what an idle agent costs).
- Open time: a store with 10,000 created agents of which 100 owe work, against the baseline of
  a store holding only those 100 agents (measured in the same run): resuming costs what is
  owed, not how many agents exist.

Run: ``.venv/bin/python bench/agents_at_scale.py [--agents 10000] [--owing 100] [--live 500]``.
"""

from __future__ import annotations

import argparse
import gc
import logging
import resource
import sys
import tempfile
import time
from pathlib import Path

import structlog

import agentkeep as ak
from agentkeep.delivery import accept_message
from agentkeep.persistence.store import Store
from agentkeep.providers import script
from agentkeep.types import MessageOptions
from agentkeep.types.records import AgentRow


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def providers(responses: int) -> ak.Providers:
    registry = ak.Providers()
    registry.add(
        "local", ak.ScriptedModel([script.text("ok")] * responses, record=False), kind="gym"
    )
    return registry


def live_agent_memory(home: Path, count: int) -> float:
    with ak.AgentSystem.open(
        home, providers=providers(count), provider="local", model="gym-1", idle_grace_seconds=3600
    ) as system:
        agents = [system.create() for _ in range(count)]
        gc.collect()
        before = rss_bytes()
        for agent in agents:
            agent.send(ak.user("hello"))
        for agent in agents:
            agent.wait_for_idle(timeout_seconds=60)
        gc.collect()
        per_agent = (rss_bytes() - before) / count
        assert len(system.internals.live_agents()) == count
    return per_agent


def passivated_agent_memory(home: Path, count: int) -> float:
    with ak.AgentSystem.open(
        home, providers=providers(0), provider="local", model="gym-1"
    ) as system:
        gc.collect()
        before = rss_bytes()
        ids = [system.create().id for _ in range(count)]
        for agent_id in ids:
            system.resolve(agent_id)  # resolving an idle agent must not start or keep anything
        gc.collect()
        per_agent = (rss_bytes() - before) / count
        assert system.internals.live_agents() == []
    return per_agent


def seed_store(home: Path, *, agents: int, owing: int) -> list[str]:
    """Create ``agents`` agents directly in the store; queue one message for ``owing`` of them."""
    ids = [f"agent{n:06d}" for n in range(agents)]
    with Store.open(home) as store:

        def create_all(tx: object) -> None:
            for agent_id in ids:
                tx.agents.create(AgentRow(id=agent_id, config={}))  # type: ignore[attr-defined]

        store.transact(create_all)
        for agent_id in ids[:owing]:
            store.transact(
                lambda tx, agent_id=agent_id: accept_message(
                    tx,
                    agent_id,
                    queue="send",
                    message=ak.user("owed"),
                    message_id=f"m{agent_id}",
                    options=MessageOptions(),
                    metadata=None,
                )
            )
    return ids[:owing]


def open_and_drain(home: Path, owing: list[str]) -> tuple[float, float]:
    """Seconds to open (lock, migrate, find and start owed agents) and to drain the work."""
    started = time.perf_counter()
    system = ak.AgentSystem.open(
        home, providers=providers(len(owing)), provider="local", model="gym-1"
    )
    opened = time.perf_counter() - started
    for agent_id in owing:
        system.wait_for_idle(agent_id, timeout_seconds=120)
    drained = time.perf_counter() - started
    system.close()
    return opened, drained


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--owing", type=int, default=100)
    parser.add_argument("--live", type=int, default=500)
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        live = live_agent_memory(root / "live", args.live)
        idle = passivated_agent_memory(root / "idle", args.live)
        print(f"memory per live agent actor:   {live / 1024:8.1f} KiB  ({args.live} agents)")
        # RSS moves in pages: a figure within a page of zero means "nothing measurable".
        print(
            f"memory per passivated agent:   {max(idle, 0) / 1024:8.1f} KiB  ({args.live} agents)"
        )
        many = seed_store(root / "many", agents=args.agents, owing=args.owing)
        few = seed_store(root / "few", agents=args.owing, owing=args.owing)
        many_open, many_drain = open_and_drain(root / "many", many)
        few_open, few_drain = open_and_drain(root / "few", few)
        print(
            f"open {args.agents:>6} agents ({args.owing} owing): "
            f"open {many_open * 1000:7.1f} ms, drained {many_drain * 1000:7.1f} ms"
        )
        print(
            f"open {args.owing:>6} agents ({args.owing} owing): "
            f"open {few_open * 1000:7.1f} ms, drained {few_drain * 1000:7.1f} ms  (baseline)"
        )
        print(f"ratio open time {args.agents} vs {args.owing} agents: {many_open / few_open:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
