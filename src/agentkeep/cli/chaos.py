"""``agentkeep chaos list`` and ``agentkeep chaos run``: the seeded chaos campaigns.

``run`` plays seeds of one or more suites (see :mod:`agentkeep.cli.chaos_suites`) with a
progress bar on stderr, then prints every failing seed (what broke, the invariant, the
trace and the exact command replaying it) and a summary table; with ``--json`` one JSON
document instead (stdout stays clean: the progress bar is on stderr). The exit status is 1 if
any seed found a violation. Campaign code is imported only when a command runs, so the rest
of the CLI never depends on it.
"""

from __future__ import annotations

import sys
import textwrap
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from agentkeep.cli.context import CliState, pass_state
from agentkeep.cli.output import EXIT_BAD_INPUT, EXIT_FAILURE, CliError

if TYPE_CHECKING:
    from agentkeep.cli.chaos_suites import Outcome, Suite


@click.group()
def chaos() -> None:
    """Seeded chaos campaigns against the runtime (crashes, flaky store, kills, power cuts,
    PostgreSQL server faults).

    `agentkeep chaos list` names the suites; `agentkeep chaos run --suite NAME --seeds N`
    runs some. A failing seed prints the command that replays it.
    """


@chaos.command(name="list")
@pass_state
def list_suites(state: CliState) -> None:
    """Name every suite, what it does, and how to run it."""
    from agentkeep.cli.chaos_suites import suites

    value = {"suites": [suite.to_json() for suite in suites().values()]}
    state.output.result(value, _render_list)


@chaos.command(name="run")
@click.option(
    "--suite",
    "names",
    multiple=True,
    metavar="NAME",
    help="A suite (repeatable; default: every suite). `agentkeep chaos list` names them.",
)
@click.option(
    "--seeds",
    type=int,
    default=None,
    help="How many seeds per suite (default: 1 with --seed, else $CHAOS_SEEDS, else the "
    "suite's default).",
)
@click.option(
    "--seed",
    type=int,
    default=None,
    help="The first seed (default 0); alone, replays just this seed.",
)
@click.option("--start", type=int, default=None, hidden=True)  # the old name of --seed
@click.option(
    "--database",
    default=None,
    metavar="URL",
    help="Run on this PostgreSQL server, each seed in a fresh schema (default: $CHAOS_DATABASE, "
    "else `agentkeep --database`, else SQLite). SQLite-only suites are skipped there.",
)
@pass_state
def run(
    state: CliState,
    names: tuple[str, ...],
    seeds: int | None,
    seed: int | None,
    start: int | None,
    database: str | None,
) -> None:
    """Run seeds of chaos suites; every failing seed prints its violations and the command
    replaying it, and the exit status is 1."""
    from agentkeep.chaos.backend import SQLITE_ONLY, chaos_database, use_database
    from agentkeep.chaos.quiet import quiet_logs
    from agentkeep.cli.chaos_suites import SERVER_ONLY, suites

    known = suites()
    chosen = _choose(known, names)
    url = database or chaos_database() or state.home.database
    if url is not None:
        skipped = [suite.name for suite in chosen if suite.name in SQLITE_ONLY]
        for name in skipped:
            click.echo(f"{name}: skipped on PostgreSQL ({SQLITE_ONLY[name]})", err=True)
        chosen = [suite for suite in chosen if suite.name not in skipped]
    elif not names:  # every suite, on SQLite: a server's own faults only when named
        for suite in chosen:
            if suite.name in SERVER_ONLY:
                click.echo(f"{suite.name}: skipped on SQLite ({SERVER_ONLY[suite.name]})", err=True)
        chosen = [suite for suite in chosen if suite.name not in SERVER_ONLY]
    first = seed if seed is not None else start
    plan = [(suite, _seed_list(suite, seeds, first)) for suite in chosen]
    with quiet_logs(), use_database(url):
        report = _play(plan)
    state.output.result(report.to_json(), lambda _: report.render())
    if not report.ok:
        click.get_current_context().exit(EXIT_FAILURE)


def _choose(known: dict[str, Suite], names: tuple[str, ...]) -> list[Suite]:
    unknown = [name for name in dict.fromkeys(names) if name not in known]
    if unknown:
        raise CliError(
            f"Unknown chaos suite(s): {', '.join(unknown)}. Known suites: {', '.join(known)}.",
            code="unknown_suite",
            hint=f"Choose from: {', '.join(known)} (`agentkeep chaos list` describes them).",
            exit_code=EXIT_BAD_INPUT,
        )
    return [known[name] for name in dict.fromkeys(names)] or list(known.values())


def _seed_list(suite: Suite, seeds: int | None, first: int | None) -> list[int]:
    from agentkeep.chaos.campaigns import SEED_ENV, SEEDS_ENV, seeds_from_env

    if seeds is not None and seeds < 1:
        raise CliError(
            f"--seeds must be at least 1 (got {seeds}).",
            code="invalid_seeds",
            hint="Pass --seeds N with N >= 1, or --seed S alone to replay one seed.",
            exit_code=EXIT_BAD_INPUT,
        )
    if first is not None:
        return list(range(first, first + (seeds or 1)))
    if seeds is not None:
        return list(range(seeds))
    try:
        chosen = seeds_from_env(suite.default_seeds)
    except ValueError as error:
        raise CliError(
            f"${SEEDS_ENV} or ${SEED_ENV} is not a whole number: {error}",
            code="invalid_seeds",
            hint=f"Fix or unset ${SEEDS_ENV} / ${SEED_ENV}, or pass --seeds N.",
            exit_code=EXIT_BAD_INPUT,
        ) from error
    if not chosen:
        raise CliError(
            f"${SEEDS_ENV} asks for no seeds.",
            code="invalid_seeds",
            hint=f"Set ${SEEDS_ENV} to 1 or more, or pass --seeds N.",
            exit_code=EXIT_BAD_INPUT,
        )
    return chosen


# -- playing and reporting ---------------------------------------------------------------------


@dataclass
class SuiteRun:
    """What one suite's seeds did."""

    suite: Suite
    seeds: list[int]
    failures: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "suite": self.suite.name,
            "kind": self.suite.kind,
            "first_seed": self.seeds[0],
            "seeds_run": len(self.seeds),
            "failed": len(self.failures),
            "seconds": round(self.seconds, 3),
            "failures": [outcome.to_json() for outcome in self.failures],
        }


@dataclass
class Report:
    """Every suite a ``chaos run`` played."""

    runs: list[SuiteRun]
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not any(run.failures for run in self.runs)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "seeds_run": sum(len(run.seeds) for run in self.runs),
            "failed": sum(len(run.failures) for run in self.runs),
            "seconds": round(self.seconds, 3),
            "suites": [run.to_json() for run in self.runs],
        }

    def render(self) -> str:
        lines: list[str] = []
        for run in self.runs:
            for outcome in run.failures:
                lines += _render_failure(outcome)
                lines.append("")
        lines.append(f"{'suite':<24}{'seeds':>8}{'failed':>8}{'seconds':>10}")
        for run in self.runs:
            name, count, failed = run.suite.name, len(run.seeds), len(run.failures)
            lines.append(f"{name:<24}{count:>8}{failed:>8}{run.seconds:>10.1f}")
        if len(self.runs) > 1:
            count = sum(len(run.seeds) for run in self.runs)
            failed = sum(len(run.failures) for run in self.runs)
            lines.append(f"{'total':<24}{count:>8}{failed:>8}{self.seconds:>10.1f}")
        return "\n".join(lines)


def _play(plan: list[tuple[Suite, list[int]]]) -> Report:
    from agentkeep.cli.chaos_suites import crashed

    started = time.monotonic()
    report = Report(runs=[SuiteRun(suite=suite, seeds=seeds) for suite, seeds in plan])
    total = sum(len(seeds) for _, seeds in plan)
    label = f"chaos: {total} seed(s) of {len(plan)} suite(s)"
    with click.progressbar(
        length=total,
        label=label,
        file=sys.stderr,
        show_pos=True,
        item_show_func=lambda item: item,
    ) as bar:
        for run in report.runs:
            suite_started = time.monotonic()
            try:
                for seed in run.seeds:
                    failed = sum(len(r.failures) for r in report.runs)
                    bar.current_item = f"{run.suite.name} seed {seed}, {failed} failed so far"
                    bar.render_progress()  # name the seed now running, not the one just done
                    seed_started = time.monotonic()
                    try:
                        outcome = run.suite.run(seed)
                    except Exception as error:  # one broken seed must not lose a long hunt
                        seconds = time.monotonic() - seed_started
                        outcome = crashed(run.suite.name, seed, error, seconds)
                    if not outcome.ok:
                        run.failures.append(outcome)
                    bar.update(1)
            finally:
                run.suite.finish()
            run.seconds = time.monotonic() - suite_started
    report.seconds = time.monotonic() - started
    return report


def _render_failure(outcome: Outcome) -> list[str]:
    count = len(outcome.findings)
    lines = [f"FAILED {outcome.suite} seed {outcome.seed}: {count} violation(s)"]
    for finding in outcome.findings:
        lines.append(f"  - {finding.description}")
    lines += [f"    {step}" for step in outcome.trace]
    lines.append(f"  replay: {outcome.replay}")
    if outcome.replay_pytest:
        lines.append(f"      or: {outcome.replay_pytest}")
    return lines


def _render_list(value: dict[str, Any]) -> str:
    lines: list[str] = []
    for suite in value["suites"]:
        lines.append(f"{suite['name']}  ({suite['kind']}, {suite['default_seeds']} seeds)")
        lines += textwrap.wrap(
            suite["description"], width=96, initial_indent="    ", subsequent_indent="    "
        )
        lines.append(f"    run:   {suite['run']}")
        lines.append(f"    sweep: {suite['sweep']}")
    return "\n".join(lines)
