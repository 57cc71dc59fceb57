"""The ``agentkeep`` command: admin commands over a state directory, and the demo.

Output is readable text on a terminal and one JSON document with ``--json`` (stable field
names); errors go to stderr with a message saying what to do, and a non-zero exit code:

====  ==============================================================================
0     success
1     the command failed (or ``db check`` found a problem)
2     bad input: flags, a malformed config file, an empty message
3     the state directory is held by another process (the message names its pid)
4     no such agent, or no store in the state directory
====  ==============================================================================
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import apsw
import click

from agentkeep.cli.admin import create, delete, list_agents, resume, show, transcript
from agentkeep.cli.chaos import chaos
from agentkeep.cli.check import db
from agentkeep.cli.context import CliState
from agentkeep.cli.demo import demo, demo_child
from agentkeep.cli.history import purge
from agentkeep.cli.logs import DEFAULT_LOG_LEVEL, LOG_LEVELS, configure_logging
from agentkeep.cli.messaging import abort, compact, send, steer, talk
from agentkeep.cli.output import CliError, Output, fail, from_library_error
from agentkeep.cli.runtime import Home
from agentkeep.errors import AgentkeepError
from agentkeep.persistence.store import HOME_ENV, resolve_home

__all__ = ["cli", "main"]

_HELP = """Run and inspect durable agents in a state directory.

Start with `agentkeep demo`. Output is text for people, or one JSON document with --json.
Errors go to stderr with what to do, and an exit code:

\b
  0  success
  1  the command failed (or `db check` found a problem)
  2  bad input: flags, a malformed config file, an empty message
  3  the state directory is held by another process (named by pid)
  4  no such agent, or no store in the state directory

\b
Providers: the deterministic local model (provider "local", model "gym-1") is the
default; providers.toml in the state directory registers more, e.g.
  [providers.claude]
  kind = "claude"
  class = "anthropic"          # anthropic | openai | openai-compatible | responding
  model = "anthropic/claude-sonnet-4-6"  # the prefix names the model family
  api_key_env = "ANTHROPIC_API_KEY"
"""


class _Group(click.Group):
    """Turns every error a command raises into a message on stderr and an exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CliError as error:
            fail(error, json_mode=_json_mode(ctx))
        except AgentkeepError as error:
            state = ctx.find_object(CliState)
            home = str(state.home.path) if state is not None else None
            fail(from_library_error(error, home=home), json_mode=_json_mode(ctx))
        except apsw.Error as error:
            unreadable = CliError(
                f"The database could not be read: {error}",
                code="database_unreadable",
                hint="Run `agentkeep db check`; restore agents.db from a backup if it fails.",
            )
            fail(unreadable, json_mode=_json_mode(ctx))


def _json_mode(ctx: click.Context) -> bool:
    state = ctx.find_object(CliState)
    return state.json_mode if state is not None else False


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]}, help=_HELP)
@click.option(
    "--home",
    type=click.Path(file_okay=False),
    default=None,
    help=f"The state directory (default: ${HOME_ENV}, else ./.agentkeep).",
)
@click.option("--json", "json_mode", is_flag=True, help="Print JSON (stable field names).")
@click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    default=DEFAULT_LOG_LEVEL,
    show_default=True,
    help="Logs go to stderr: console lines on a terminal, JSON lines otherwise.",
)
@click.version_option(package_name="agentkeep")
@click.pass_context
def cli(ctx: click.Context, home: str | None, json_mode: bool, log_level: str) -> None:
    configure_logging(log_level)
    ctx.obj = CliState(
        home=Home(path=resolve_home(home)),
        output=Output(json_mode=json_mode),
        log_level=log_level.lower(),
    )


for _command in (
    create,
    list_agents,
    show,
    transcript,
    send,
    steer,
    talk,
    abort,
    compact,
    delete,
    resume,
    db,
    chaos,
    demo,
    demo_child,
):
    cli.add_command(_command)
cli.add_command(purge)


def main(argv: Sequence[str] | None = None) -> None:
    """Run the ``agentkeep`` command (the console script's entry point)."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="agentkeep")
