"""``agentkeep chaos run``: the seeded chaos campaigns of :mod:`agentkeep.chaos`.

A thin front for ``python -m agentkeep.chaos`` (imported only when the command runs, so
the rest of the CLI never depends on the campaign code).
"""

from __future__ import annotations

import sys

import click

from agentkeep.cli.output import EXIT_BAD_INPUT, CliError


@click.group()
def chaos() -> None:
    """Seeded chaos campaigns against the runtime (crashes, flaky store, aborts, ...)."""


@chaos.command(name="run")
@click.option("--suite", "suites", multiple=True, help="A suite name (repeatable; default: all).")
@click.option("--seeds", type=int, default=None, help="How many seeds per suite.")
@click.option("--start", type=int, default=0, show_default=True, help="The first seed.")
@click.option("--seed", type=int, default=None, help="Run only this seed (replays a failure).")
def run(suites: tuple[str, ...], seeds: int | None, start: int, seed: int | None) -> None:
    """Run campaigns; every failing seed prints its violations and the command replaying it."""
    from agentkeep.chaos.__main__ import main as chaos_main
    from agentkeep.chaos.campaigns import SUITES

    unknown = sorted(set(suites) - set(SUITES))
    if unknown:
        raise CliError(
            f"Unknown chaos suite(s): {', '.join(unknown)}.",
            code="unknown_suite",
            hint=f"Choose from: {', '.join(SUITES)}.",
            exit_code=EXIT_BAD_INPUT,
        )
    argv = [*suites, "--start", str(start)]
    if seeds is not None:
        argv += ["--seeds", str(seeds)]
    if seed is not None:
        argv += ["--seed", str(seed)]
    sys.exit(chaos_main(argv))
