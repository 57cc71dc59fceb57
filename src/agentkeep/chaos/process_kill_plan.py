"""How each process of a process-kill seed dies (:mod:`agentkeep.chaos.process_kills`): a
:class:`Kill` per process, drawn from the seed by :func:`plan`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Literal

KillKind = Literal["store", "tool", "timer"]
# Measured on 2 cores: the first process (two messages from an empty directory) runs about
# 150 store operations, 2 tool calls and 0.12-0.17 s from READY to exit; a later one (one new
# message, plus whatever its predecessor left) 30-130 operations, 0-2 calls, 0.06-0.12 s. The
# bounds reach just past that, so a few kills never fire (that process finishes its work).
FIRST_BOUNDS = (160, 2, 0.16)  # store operations, tool executions, seconds
LATER_BOUNDS = (110, 2, 0.12)


@dataclass(frozen=True)
class Kill:
    """How one process is planned to die (``kind`` None: left alone to finish)."""

    kind: KillKind | None
    at: int = 0  # the store operation or tool execution
    delay_seconds: float = 0.0
    # Also: the ledger subscriber kills the process when it receives its N-th event of this
    # process, before recording it (0: it does not), whichever kill comes first.
    subscriber_at: int = 0

    def describe(self) -> str:
        """A readable account, for failure messages and replays."""
        also = f" or at the subscriber's event #{self.subscriber_at}" if self.subscriber_at else ""
        if self.kind is None:
            return "left alone"
        if self.kind == "timer":
            return f"timer SIGKILL after {self.delay_seconds:.3f} s{also}"
        return f"{self.kind} kill at {self.kind} #{self.at}{also}"


def plan(seed: int) -> list[Kill]:
    """The seed's processes: 1–5 killed ones, then one left alone."""
    rng = random.Random(seed)
    kills: list[Kill] = []
    for number in range(rng.randint(1, 5)):
        operations, tools, seconds = FIRST_BOUNDS if number == 0 else LATER_BOUNDS
        kind: KillKind = rng.choice(["store", "store", "tool", "timer"])
        if kind == "store":
            kills.append(Kill("store", at=rng.randint(1, operations)))
        elif kind == "tool":
            kills.append(Kill("tool", at=rng.randint(1, tools)))
        else:
            kills.append(Kill("timer", delay_seconds=rng.uniform(0.0, seconds)))
    # The subscriber's own kill points come from a second generator, so the kills above
    # are what they were before the subscriber existed.
    subscriber = random.Random(seed ^ 0x5B5C81BE)
    for index, kill in enumerate(kills):
        if subscriber.random() < 1 / 3:
            kills[index] = replace(kill, subscriber_at=subscriber.randint(1, 10))
    return [*kills, Kill(None)]
