"""What one seed of a chaos suite yields (:class:`CampaignResult`), how to replay it, and which
seeds a run plays (``CHAOS_SEEDS`` / ``CHAOS_SEED``)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from agentkeep.chaos.checker import Violation
from agentkeep.chaos.world import ProcessReport

DEFAULT_SEEDS = 15
SEEDS_ENV = "CHAOS_SEEDS"
SEED_ENV = "CHAOS_SEED"


@dataclass
class CampaignResult:
    """One seed of one suite: its processes and every violation the checker found."""

    suite: str
    seed: int
    violations: list[Violation] = field(default_factory=list)
    processes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    # Every process's report, and the generations that carried a fault plan (run
    # ``calibration.healthy()``: that would have carried one).
    reports: list[ProcessReport] = field(default_factory=list)
    faulted: set[int] = field(default_factory=set)
    # What a suite counted as it checked (notices, migrations, transactions…), for sweeps.
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the checker found no violation."""
        return not self.violations

    @property
    def replay(self) -> str:
        """The shell command that replays exactly this seed of this suite."""
        return replay_command(self.suite, self.seed)

    def describe(self) -> str:
        """A multi-line report: the violations, the processes played, and the replay command."""
        lines = [
            f"chaos suite {self.suite!r} seed {self.seed}: {len(self.violations)} violation(s)"
        ]
        lines += [f"  - {v.describe()}" for v in self.violations]
        lines += [f"  {p}" for p in self.processes]
        lines.append(f"  replay: {self.replay}")
        return "\n".join(lines)


def verdict_line(suite: str, seed: int, mutant: str | None, ok: bool, seconds: float) -> str:
    """The first line of a process or server campaign's seed report (``describe()``): the
    suite, the seed, the mutant if one was installed, the verdict and the time taken."""
    head = f"{suite} seed {seed}" + (f" (mutant {mutant})" if mutant else "")
    return f"{head}: {'ok' if ok else 'FAILED'} in {seconds:.1f} s"


def replay_command(suite: str, seed: int) -> str:
    """The shell command replaying one seed of a suite (``CHAOS_SEED=seed`` pytest on its test
    file).
    """
    return f"CHAOS_SEED={seed} .venv/bin/pytest tests/chaos/test_{suite}.py"


def seeds_from_env(default: int = DEFAULT_SEEDS) -> list[int]:
    """``CHAOS_SEED`` (one seed) or ``range(CHAOS_SEEDS)``."""
    one = os.environ.get(SEED_ENV, "").strip()
    if one:
        return [int(one)]
    count = os.environ.get(SEEDS_ENV, "").strip()
    return list(range(int(count) if count else default))
