"""Every chaos suite the CLI can run, one seed at a time, with one shape of result.

The in-process suites of :data:`agentkeep.chaos.campaigns.SUITES` report
:class:`~agentkeep.chaos.Violation` values; the real-process campaign
(:mod:`agentkeep.chaos.process_kills`), the power-loss campaign
(:mod:`agentkeep.chaos.power`), the PostgreSQL server faults
(:mod:`agentkeep.chaos.pg_server_faults`) and the workers' failover
(:mod:`agentkeep.chaos.worker_failover`) report problem strings. :func:`suites` wraps each in a
:class:`Suite` whose ``run(seed)`` returns an :class:`Outcome`: the seed, what broke (with
the invariant where one is named), the trace of the run and the commands replaying it.

Campaign modules are imported when :func:`suites` is called, and a suite's campaign function
is looked up when it runs (so tests can swap one in).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

SuiteKind = Literal["in-process", "processes", "power-loss", "server-faults", "workers"]

PROCESS_KILLS = "process_kills"
POWER_LOSS = "power_loss"
PG_SERVER_FAULTS = "pg_server_faults"
WORKER_FAILOVER = "worker_failover"

#: Suites that need a PostgreSQL server (their own throwaway cluster when no URL is given),
#: with the reason: a run of every suite on SQLite leaves them out; naming one runs it.
SERVER_ONLY: dict[str, str] = {
    PG_SERVER_FAULTS: "faults only a PostgreSQL server has (it starts a throwaway cluster "
    "when no --database is given)",
    WORKER_FAILOVER: "workers share a store only on PostgreSQL (it starts a throwaway "
    "cluster when no --database is given)",
}

_INVARIANT = re.compile(r"^(?:§7\.(\d+)|([LTCOKF]\d))[ :]")


def replay_command(suite: str, seed: int) -> str:
    """The CLI command that replays one seed of one suite."""
    return f"agentkeep chaos run --suite {suite} --seed {seed}"


@dataclass(frozen=True)
class Finding:
    """One broken promise of one seed: the invariant or ledger ``L`` name (None when the
    campaign names none, e.g. a failed integrity check after a power cut) and its
    description."""

    invariant: int | str | None
    name: str | None
    description: str

    def to_json(self) -> dict[str, Any]:
        return {"invariant": self.invariant, "name": self.name, "description": self.description}


@dataclass
class Outcome:
    """One seed of one suite."""

    suite: str
    seed: int
    findings: list[Finding] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)  # what each process (or the plan) did
    replay_pytest: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def replay(self) -> str:
        return replay_command(self.suite, self.seed)

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "violations": [finding.to_json() for finding in self.findings],
            "replay": self.replay,
            "replay_pytest": self.replay_pytest,
            "trace": list(self.trace),
        }


@dataclass(frozen=True)
class Suite:
    """A suite the CLI can run: ``run(seed)`` plays one seed."""

    name: str
    kind: SuiteKind
    description: str
    default_seeds: int
    sweep: str  # the module's own sweep command (without the CLI)
    run: Callable[[int], Outcome]
    finish: Callable[[], None] = lambda: None  # after its last seed: release what it kept

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "description": self.description,
            "default_seeds": self.default_seeds,
            "run": f"agentkeep chaos run --suite {self.name} --seeds {self.default_seeds}",
            "sweep": self.sweep,
        }


def suites() -> dict[str, Suite]:
    """Every suite, in-process ones first (in :data:`~agentkeep.chaos.campaigns.SUITES`
    order), then ``process_kills``, ``power_loss``, ``pg_server_faults`` and
    ``worker_failover``."""
    from agentkeep.chaos import campaigns, pg_server_faults, power, process_kills, worker_failover

    found: dict[str, Suite] = {}
    for name, function in campaigns.SUITES.items():
        found[name] = Suite(
            name=name,
            kind="in-process",
            description=_prose(function.__doc__),
            default_seeds=campaigns.DEFAULT_SEEDS,
            sweep=f"python -m agentkeep.chaos {name} --seeds {campaigns.DEFAULT_SEEDS}",
            run=_in_process(name),
        )
    found[PROCESS_KILLS] = Suite(
        name=PROCESS_KILLS,
        kind="processes",
        description=_prose(process_kills.__doc__),
        default_seeds=process_kills.DEFAULT_SEEDS,
        sweep=f"python -m agentkeep.chaos.process_kills --seeds {process_kills.DEFAULT_SEEDS}"
        " --jobs 2",
        run=_process_kills,
    )
    found[POWER_LOSS] = Suite(
        name=POWER_LOSS,
        kind="power-loss",
        description=_prose(power.__doc__),
        default_seeds=power.DEFAULT_SEEDS,
        sweep=f"python -m agentkeep.chaos.power --seeds {power.DEFAULT_SEEDS} --jobs 2",
        run=_power_loss,
    )
    on_server: tuple[tuple[str, SuiteKind, Any], ...] = (
        (PG_SERVER_FAULTS, "server-faults", pg_server_faults),
        (WORKER_FAILOVER, "workers", worker_failover),
    )
    for name, kind, module in on_server:
        on_cluster = _OnCluster(name)
        found[name] = Suite(
            name=name,
            kind=kind,
            description=_prose(module.__doc__),
            default_seeds=module.DEFAULT_SEEDS,
            sweep=f"python -m agentkeep.chaos.{name} --seeds {module.DEFAULT_SEEDS}",
            run=on_cluster.run,
            finish=on_cluster.close,
        )
    return found


def _in_process(name: str) -> Callable[[int], Outcome]:
    def run(seed: int) -> Outcome:
        from agentkeep.chaos import campaigns
        from agentkeep.chaos.invariants import INVARIANTS

        started = time.monotonic()
        result = campaigns.SUITES[name](seed)
        findings = [
            Finding(v.invariant, INVARIANTS.get(v.invariant), v.describe())
            for v in result.violations
        ]
        return Outcome(
            suite=name,
            seed=seed,
            findings=findings,
            trace=list(result.processes),
            replay_pytest=result.replay,
            seconds=time.monotonic() - started,
        )

    return run


def _process_kills(seed: int) -> Outcome:
    from agentkeep.chaos import process_kills

    started = time.monotonic()
    result = process_kills.run_campaign(seed)
    return Outcome(
        suite=PROCESS_KILLS,
        seed=seed,
        findings=[_from_problem(problem) for problem in result.problems],
        trace=[run.describe() for run in result.runs],
        replay_pytest=result.replay,
        seconds=time.monotonic() - started,
    )


def _power_loss(seed: int) -> Outcome:
    from agentkeep.chaos import power

    started = time.monotonic()
    result = power.run_campaign(seed)
    trace = [
        f"plan: {result.plan.describe()}; the cut interrupted {result.interrupted}",
        f"{len(result.submitted)} submitted, {len(result.acknowledged)} acknowledged, "
        f"{len(result.present)} present after the cut",
    ]
    return Outcome(
        suite=POWER_LOSS,
        seed=seed,
        findings=[_from_problem(problem) for problem in result.problems],
        trace=trace,
        replay_pytest=result.replay,
        seconds=time.monotonic() - started,
    )


class _OnCluster:
    """A campaign on PostgreSQL (``pg_server_faults``, ``worker_failover``) one seed at a
    time: on the selected server (:func:`~agentkeep.chaos.backend.chaos_database`) when there
    is one — ``pg_server_faults`` restarts its own cluster even then — else on a throwaway
    cluster started at the first seed that needs it and shared by the seeds of the run until
    :meth:`close`. The campaign module's ``run_campaign`` is looked up at each seed."""

    def __init__(self, suite: str) -> None:
        self._suite = suite
        self._cluster: Any = None

    def run(self, seed: int) -> Outcome:
        import importlib

        from agentkeep.chaos.backend import chaos_database
        from agentkeep.chaos.pg_server import OwnCluster

        module = importlib.import_module(f"agentkeep.chaos.{self._suite}")
        if self._cluster is None:
            self._cluster = OwnCluster()
        started = time.monotonic()
        result = module.run_campaign(seed, database=chaos_database(), cluster=self._cluster)
        trace = result.describe().splitlines()[1:]
        return Outcome(
            suite=self._suite,
            seed=seed,
            findings=[_from_problem(problem) for problem in result.problems],
            trace=[line.strip() for line in trace if not line.lstrip().startswith(("!", "replay"))],
            replay_pytest=None,
            seconds=time.monotonic() - started,
        )

    def close(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None


def _from_problem(problem: str) -> Finding:
    """A problem string; the checker's start: a base-spec number, ``LN (name)``, ``TN (name)``,
    ``ON: …`` (the server faults' ownership checks), ``KN``/``FN`` (the failover campaign's
    keys and fence)."""
    from agentkeep.chaos.invariants import INVARIANTS

    match = _INVARIANT.match(problem)
    if match is None:
        return Finding(None, None, problem)
    invariant: int | str = int(match.group(1)) if match.group(1) else match.group(2)
    return Finding(invariant, INVARIANTS.get(invariant), problem)


def crashed(suite: str, seed: int, error: Exception, seconds: float) -> Outcome:
    """The outcome of a seed whose campaign raised instead of reporting (a harness bug or a
    runtime error escaping it): a failure too, with its replay command."""
    description = f"the campaign raised {type(error).__name__}: {error}"
    return Outcome(
        suite=suite, seed=seed, findings=[Finding(None, None, description)], seconds=seconds
    )


def _prose(doc: str | None) -> str:
    """The first paragraph of a docstring on one line, without reST literals."""
    paragraph = (doc or "").strip().split("\n\n")[0]
    return " ".join(paragraph.replace("``", "`").split())
