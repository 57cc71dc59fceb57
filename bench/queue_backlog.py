"""What a backlog costs: ``send`` while one session's queue grows to ``--messages`` entries
(its agent held mid-response, so nothing is consumed), then the drain once it is released.

Baselines from the same run: ``send`` into a queue of fewer than a tenth of the backlog (the
first tenth of the sends), and a step of the same system with nothing queued. A ``send``
writes one entry whatever waits before it, so its cost should stay flat as the queue grows
(goal: the last tenth's median within 1.5x of the first tenth's). Run:
``.venv/bin/python bench/queue_backlog.py``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.providers.script import ScriptedResponse
from agentkeep.providers.scripted import ResponseScript
from agentkeep.types import Context


def _system(home: Path, first: ResponseScript, answers: int) -> ak.AgentSystem:
    responses = [first, *(script.text("ok") for _ in range(answers))]
    model = ak.ScriptedModel(responses, record=False)
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    return ak.AgentSystem.open(home, providers=providers, provider="local", model="gym-1")


def _step_us(home: Path, steps: int) -> float:
    """The median of ``steps`` plain steps (send, answer, idle) with nothing queued."""
    with _system(home, script.text("ok"), steps) as system:
        agent = system.create()
        took = []
        for n in range(steps):
            started = time.perf_counter()
            agent.send(ak.user(f"step {n}"))
            agent.wait_for_idle(timeout_seconds=60)
            took.append(time.perf_counter() - started)
    return statistics.median(took) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--messages", type=int, default=5000, help="the backlog's length")
    parser.add_argument("--steps", type=int, default=200, help="plain steps for the baseline")
    args = parser.parse_args(argv)
    tenth = max(1, args.messages // 10)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"one session's backlog of {args.messages} messages; load average {load}")

    released = threading.Event()

    def held(context: Context) -> ScriptedResponse:
        released.wait()
        return script.text("ok")

    with tempfile.TemporaryDirectory() as home:
        step = _step_us(Path(home) / "plain", args.steps)
        with _system(Path(home) / "backlog", held, args.messages) as system:
            agent = system.create()
            agent.send(ak.user("held"))  # the response that holds the agent
            took = []
            for n in range(args.messages):
                started = time.perf_counter()
                agent.send(ak.user(f"queued {n}"))
                took.append(time.perf_counter() - started)
            started = time.perf_counter()
            released.set()
            agent.wait_for_idle(timeout_seconds=600)
            drain = time.perf_counter() - started

    first = statistics.median(took[:tenth]) * 1e6
    last = statistics.median(took[-tenth:]) * 1e6
    print(f"  send, first tenth (queue < {tenth:>5}): median {first:8.0f} µs   (the baseline)")
    ratio = last / first
    verdict = "✓" if ratio <= 1.5 else "✗"
    print(
        f"  send, last tenth  (queue ≥ {args.messages - tenth:>5}): median {last:8.0f} µs   "
        f"{ratio:.2f}x  (goal <= 1.5x) {verdict}"
    )
    per_message = drain / args.messages * 1e6
    print(
        f"  drain: {drain:.2f} s, {per_message:.0f} µs per queued message; a plain step "
        f"{step:.0f} µs ({per_message / step:.2f}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
