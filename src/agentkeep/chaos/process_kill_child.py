"""One worker process of the process-kill campaign (:mod:`agentkeep.chaos.process_kills`):
started with its kill armed (a store fault point, a tool count, the subscriber's event count)
or killed by a timer, and what it did (:class:`ProcessRun`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentkeep.chaos.backend import DATABASE_ENV
from agentkeep.chaos.ledger_subscriber import SUBSCRIBER_ENV, SUBSCRIBER_KILL_ENV
from agentkeep.chaos.process_kill_plan import Kill
from agentkeep.chaos.process_kill_world import DiskWorld
from agentkeep.chaos.process_worker import KILL_AT_TOOL_ENV, MUTANT_ENV, OFFERS
from agentkeep.persistence.faults import FAULT_AT_ENV, FAULT_MODE_ENV

CHILD_TIMEOUT_SECONDS = 60.0


@dataclass
class ProcessRun:
    """What one child process did."""

    generation: int
    kill: Kill
    returncode: int | None = None
    result: dict[str, Any] | None = None
    seconds: float = 0.0  # from READY to exit
    died_at: str | None = None  # the operation the store's fault point named
    tool_gap: bool = False  # died with a side effect on record and its result not durable
    subscriber_killed: bool = False  # the subscriber killed it, an event received, unrecorded
    hung: bool = False  # still running a minute after it was due to finish (then killed)
    stderr_tail: list[str] = field(default_factory=list)

    @property
    def killed(self) -> bool:
        """True when the process died of SIGKILL."""
        return self.returncode == -signal.SIGKILL

    def describe(self) -> str:
        """A readable account, for failure messages and replays."""
        if self.killed:
            outcome = "killed" + (f" at {self.died_at}" if self.died_at else "")
            outcome += " by the subscriber" if self.subscriber_killed else ""
            outcome += " (side effect without result)" if self.tool_gap else ""
        else:
            outcome = f"exit {self.returncode} {self.result}"
        return f"process {self.generation} ({self.kill.describe()}): {outcome} {self.seconds:.2f} s"


def spawn_child(
    world: DiskWorld,
    run: ProcessRun,
    mutant: str | None,
    *,
    during: Callable[[subprocess.Popen[str]], None] | None = None,
    offers: int | None = None,
) -> None:
    """Run one worker process on ``world``'s directory until it exits or is killed as
    ``run.kill`` plans, recording into ``run`` how it ended (its RESULT line, the store
    operation it died at, a hang). ``during`` runs in this process once the child is ready
    (the server-fault campaign's faults), ``offers`` overrides how many messages it offers."""
    env = {k: v for k, v in os.environ.items() if k not in (FAULT_AT_ENV, KILL_AT_TOOL_ENV)}
    kill = run.kill
    if kill.kind == "store":
        env[FAULT_AT_ENV], env[FAULT_MODE_ENV] = str(kill.at), "kill"
    elif kill.kind == "tool":
        env[KILL_AT_TOOL_ENV] = str(kill.at)
    if mutant is not None:
        env[MUTANT_ENV] = mutant
    env.pop(DATABASE_ENV, None)
    if world.database is not None:
        env[DATABASE_ENV] = world.database
    # The subscriber's disconnects: a pure function of the seed and the process.
    env[SUBSCRIBER_ENV] = str(world.seed * 16 + run.generation)
    env.pop(SUBSCRIBER_KILL_ENV, None)
    if kill.subscriber_at:
        env[SUBSCRIBER_KILL_ENV] = str(kill.subscriber_at)
    (world.ledger_path.with_name("generation")).write_text(str(run.generation))
    command = [sys.executable, "-m", "agentkeep.chaos.process_worker"]
    # Each killed process brings one more message than the last (so every restart has new
    # work to be killed in); the one left alone offers them all.
    if offers is None:
        offers = len(OFFERS) if kill.kind is None else min(run.generation + 1, len(OFFERS))
    command += [str(world.home), str(world.ledger_path), str(run.generation), str(offers)]
    stderr_path = world.ledger_path.with_name(f"stderr-{run.generation}")
    with (
        stderr_path.open("w") as stderr,
        subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=stderr, env=env, text=True
        ) as child,
    ):
        assert child.stdout is not None
        ready = child.stdout.readline()
        started = time.monotonic()
        timed = kill.kind == "timer" and bool(ready)
        if during is not None and ready:
            during(child)
        try:
            child.wait(kill.delay_seconds if timed else CHILD_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            run.hung = not timed
            child.send_signal(signal.SIGKILL)
        # Not communicate(timeout=...): it reads the raw pipe and would miss whatever
        # readline() already buffered (READY and RESULT can arrive in one read).
        out = ready + child.stdout.read()
        run.returncode = child.wait(CHILD_TIMEOUT_SECONDS)
        run.seconds = time.monotonic() - started
    for line in out.splitlines():
        if line.startswith("RESULT "):
            run.result = json.loads(line.removeprefix("RESULT "))
    errors = stderr_path.read_text().splitlines()
    run.stderr_tail = errors[-8:]
    for line in errors:
        if '"store_fault_injected"' in line:
            event = json.loads(line)
            run.died_at = f"operation {event['operation']} ({event['label']})"
