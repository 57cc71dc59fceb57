"""The ``agentkeep`` command: admin commands over a state directory, and the demo.

Output is readable text on a terminal and one JSON document with ``--json`` (stable field
names); errors go to stderr with a message saying what to do, and a non-zero exit code:

====  ==============================================================================
0     success
1     the command failed (or ``db check`` found a problem)
2     bad input: flags, a malformed config file, an empty message
3     the state directory is held by another process (the message names its pid), or a
      daemon owns it and the command needs the store itself
4     no such agent, definition, session or turn, or no store in the state directory
5     the agent's turn failed (``session send --wait``, ``talk``)
130   interrupted by Ctrl-C: the turn was aborted (a second Ctrl-C exits at once)
====  ==============================================================================

The command line is the interface; the package's modules are internal (see "Public and
internal" in ``docs/architecture.md``).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from typing import Any

import apsw
import click

from agentkeep.cli.admin import resume
from agentkeep.cli.chaos import chaos
from agentkeep.cli.check import db
from agentkeep.cli.context import CliState
from agentkeep.cli.conversations import session
from agentkeep.cli.definitions import agent
from agentkeep.cli.demo import demo, demo_child
from agentkeep.cli.driver_specs import DRIVERS_HELP, specs_from
from agentkeep.cli.history import purge
from agentkeep.cli.logs import DEFAULT_LOG_LEVEL, LOG_LEVELS, configure_logging, effective_level
from agentkeep.cli.mcp import mcp
from agentkeep.cli.output import (
    CliError,
    Output,
    database_error,
    fail,
    from_library_error,
    home_is_a_file,
    no_store_hint,
    not_utf8,
)
from agentkeep.cli.runtime import Home
from agentkeep.cli.serve import serve
from agentkeep.cli.talking import talk
from agentkeep.cli.transport import OWNER_ONLY, refuse_under_daemon
from agentkeep.cli.workers import workers
from agentkeep.drivers.loading import DRIVERS_ENV
from agentkeep.errors import AgentkeepError
from agentkeep.persistence.opening import DATABASE_ENV
from agentkeep.persistence.store import HOME_ENV, resolve_home

__all__ = ["cli", "main"]

_HELP = """Run and inspect durable agents in a state directory.

Start with `agentkeep demo`. `agentkeep agent …` manages agent definitions (what an agent
is: instructions, model, tools); `agentkeep session …` the durable conversations (started
from a definition, or without one); `agentkeep talk` starts or continues one and waits for
the answer. Output is text for people, or one JSON document with --json.
When a daemon (`agentkeep serve`) owns the state directory, commands go through it.
Errors go to stderr with what to do, and an exit code:

\b
  0  success
  1  the command failed (or `db check` found a problem)
  2  bad input: flags, a malformed config file, an empty message
  3  the state directory is held by another process (named by pid), or a daemon
     owns it and the command needs the store itself
  4  no such agent, definition, session or turn, or no store in the state directory
  5  the agent's turn failed (session send --wait, talk): the failure is printed
  130  interrupted by Ctrl-C: the turn was aborted (a second Ctrl-C exits at once)

\b
Providers: the default is the local demo model (provider "demo", model "demo-1"):
it really answers arithmetic ("What is 12 * 7?") and word counts with its tools.
"local" / "gym-1" is the deterministic test model (it answers "answer-1").
providers.toml in the state directory registers more, e.g.
  [providers.claude]
  kind = "claude"
  class = "anthropic"          # anthropic | openai | openai-compatible | responding | demo
  model = "anthropic/claude-sonnet-4-6"  # its default model; the prefix names the family
  api_key_env = "ANTHROPIC_API_KEY"
  max_retries = 3              # optional; retries show on stderr
  demo_tools = true            # optional: vendor agents get the demo tools only if set
--provider X alone switches to X's default model.
"""


# The top-level names the conversation commands had before they moved under `session`, and
# `demo-daemon` (now `demo --daemon`): each exits 2 naming its command now, instead of
# "No such command".
MOVED = {
    "create": "session start",
    "list": "session list",
    "show": "session show",
    "send": "session send",
    "steer": "session send --steer",
    "abort": "session cancel",
    "compact": "session compact",
    "transcript": "session transcript",
    "delete": "session delete",
    "demo-daemon": "demo --daemon",
}


class _Group(click.Group):
    """Turns every error a command raises into a message on stderr and an exit code."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else None
        if name in MOVED and name not in self.commands:
            hint = " (without AGENT_ID: a session with no definition)" if name == "create" else ""
            raise click.UsageError(
                f"`agentkeep {name}` is now `agentkeep {MOVED[name]}`{hint}.", ctx=ctx
            )
        return super().resolve_command(ctx, args)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # Refused before anything runs: undecodable text would fail deep inside a write.
        _refuse_undecodable(self, args)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CliError as error:
            if error.code == "no_store":
                error.hint = no_store_hint(_home(ctx), error.hint)
            fail(error, json_mode=_json_mode(ctx))
        except AgentkeepError as error:
            fail(from_library_error(error, home=_home(ctx)), json_mode=_json_mode(ctx))
        except apsw.Error as error:
            fail(database_error(error, home=_home(ctx)), json_mode=_json_mode(ctx))


def _home(ctx: click.Context) -> str | None:
    state = ctx.find_object(CliState)
    return str(state.home.path) if state is not None else None


def _json_mode(ctx: click.Context) -> bool:
    state = ctx.find_object(CliState)
    return state.json_mode if state is not None else False


def _path_options(command: click.Command) -> set[str]:
    """Every option name (of ``command`` and its subcommands) whose value is a path."""
    names = {
        name
        for param in command.params
        if isinstance(param, click.Option) and isinstance(param.type, click.Path)
        for name in param.opts
    }
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            names |= _path_options(sub)
    return names


def _refuse_undecodable(group: click.Group, args: list[str]) -> None:
    """Exit 2 if an argument is not valid UTF-8 text (paths may be any bytes)."""
    path_options = _path_options(group)
    previous = ""
    for position, arg in enumerate(args, start=1):
        option = arg.partition("=")[0] if arg.startswith("--") else previous
        previous = arg
        if option in path_options:
            continue
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            fail(not_utf8(position, arg), json_mode="--json" in args)


def _switch_to_json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--json`` after the subcommand: the same as before it."""
    if not value:
        return
    context: click.Context | None = ctx
    while context is not None:
        if isinstance(context.obj, CliState):
            context.obj = dataclasses.replace(context.obj, output=Output(json_mode=True))
        context = context.parent


def _accept_json_after(command: click.Command) -> None:
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _accept_json_after(sub)
        return
    if any("--json" in param.opts for param in command.params):
        return
    command.params.append(
        click.Option(
            ["--json"],
            is_flag=True,
            expose_value=False,
            callback=_switch_to_json,
            help="Print JSON (as `agentkeep --json COMMAND`).",
        )
    )


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]}, help=_HELP)
@click.option(
    "--home",
    "--state-dir",
    "home",
    type=click.Path(),
    default=None,
    help=f"The state directory (default: ${HOME_ENV}, else ./.agentkeep); --state-dir is "
    "seed 002's spelling.",
)
@click.option(
    "--database",
    default=None,
    envvar=DATABASE_ENV,
    help="A postgresql://… URL (?schema=NAME, default agentkeep) to keep the store in instead "
    f"of the state directory's agents.db (default: ${DATABASE_ENV}); docs/postgres.md.",
)
@click.option("--json", "json_mode", is_flag=True, help="Print JSON (stable field names).")
@click.option("--drivers", default=None, envvar=DRIVERS_ENV, help=DRIVERS_HELP)
@click.option(
    "-v",
    "--verbose",
    count=True,
    help="More log detail on stderr: -v info, -vv debug.",
)
@click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    default=DEFAULT_LOG_LEVEL,
    show_default=True,
    help="Logs go to stderr: console lines on a terminal, JSON lines otherwise.",
)
@click.version_option(package_name="agentkeep")
@click.pass_context
def cli(
    ctx: click.Context,
    home: str | None,
    database: str | None,
    json_mode: bool,
    drivers: str | None,
    verbose: int,
    log_level: str,
) -> None:
    level = effective_level(log_level, verbose)
    configure_logging(level)
    path = resolve_home(home)
    if path.exists() and not path.is_dir():
        source = "--home" if home is not None else HOME_ENV
        fail(home_is_a_file(source, path), json_mode=json_mode)
    ctx.obj = CliState(
        home=Home(path=path, drivers=specs_from(ctx, drivers), database=database or None),
        output=Output(json_mode=json_mode),
        log_level=level,
    )
    if ctx.invoked_subcommand in OWNER_ONLY:
        try:
            refuse_under_daemon(ctx.obj, ctx.invoked_subcommand)
        except CliError as error:
            fail(error, json_mode=json_mode or "--json" in sys.argv)


for _command in (
    agent,
    session,
    talk,
    resume,
    db,
    chaos,
    demo,
    demo_child,
    purge,
    serve,
    mcp,
    workers,
):
    cli.add_command(_command)
    _accept_json_after(_command)


def main(argv: Sequence[str] | None = None) -> None:
    """Run the ``agentkeep`` command (the console script's entry point)."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="agentkeep")
