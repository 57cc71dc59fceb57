"""``agentkeep mcp``: serve the home's agents to an MCP client over stdio (``docs/mcp.md``).

When a daemon owns the home, the server is a thin client of its REST API
(:class:`~agentkeep.client.HttpBackend`). Otherwise the server owns the store while it runs
(it holds the home's lock, like ``resume``): it opens
the system with the CLI's providers (``providers.toml``; the local demo model by default) and
resumes every agent that owes work, then serves until the client closes stdin. stdout is the
protocol's; logs go to stderr. If another process owns the home (a second ``agentkeep mcp``
on it), the client's ``initialize`` is answered with an error saying so and naming the way
to share a home (``agentkeep serve``), and the command exits 3.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, NoReturn

import anyio
import click

from agentkeep.cli.context import CliState, drivers_after, pass_state
from agentkeep.cli.output import EXIT_STORE_LOCKED
from agentkeep.cli.runtime import open_system
from agentkeep.cli.transport import daemon_of, http_backend
from agentkeep.errors import StoreLockedError
from agentkeep.mcp.backend import SystemBackend
from agentkeep.persistence.store import HOME_ENV, resolve_home


@click.command("mcp")
@click.option(
    "--home",
    "--state-dir",
    "home",
    type=click.Path(),
    default=None,
    help=f"The state directory (as `agentkeep --home`; default: ${HOME_ENV}, else ./.agentkeep).",
)
@drivers_after()
@pass_state
def mcp(state: CliState, home: str | None) -> None:
    """Serve MCP over stdio: the wire's agents_* tools, talk_to_agent, steer_agent, cancel_turn.

    Point an MCP client at `agentkeep mcp --home DIR`. When a daemon (`agentkeep serve`)
    owns DIR, the server is a client of it; otherwise it owns DIR's store while it runs
    (other commands on DIR then exit 3) and creates it if it does not exist yet.
    """
    from agentkeep.mcp.server import build_server, serve_stdio  # the SDK: only here

    target = (
        state.home if home is None else dataclasses.replace(state.home, path=resolve_home(home))
    )
    scoped = dataclasses.replace(state, home=target)
    daemon = daemon_of(scoped)
    if daemon is not None:
        # A thin client: the daemon owns the store; every tool is one of its REST calls.
        backend = http_backend(scoped, daemon)
        try:
            anyio.run(serve_stdio, build_server(backend))
        finally:
            backend.close()
        return
    try:
        with open_system(target, resume=True, create=True) as (system, _):
            anyio.run(serve_stdio, build_server(SystemBackend(system)))
    except StoreLockedError as error:  # raised by the opening: nothing was served
        _refuse_held_home(scoped, error)


def _refuse_held_home(state: CliState, error: StoreLockedError) -> NoReturn:
    """Another process (often another ``agentkeep mcp``) owns the home: tell the MCP client
    why and what to do (its ``initialize`` gets the error), say it on stderr too (hosts log
    it), and exit 3 once the client hangs up."""
    from agentkeep.mcp.server import refuse_stdio

    holder = f"process {error.holder_pid}" if error.holder_pid is not None else "another owner"
    home = state.home.path
    message = (
        f"agentkeep mcp cannot serve {home}: it is in use by {holder} (another `agentkeep "
        f"mcp`, or a command that owns it). To share it among several MCP clients, run "
        f"`agentkeep serve --home {home}` once: every `agentkeep mcp` on it then goes "
        "through that daemon."
    )
    click.echo(f"error: {message}", err=True)
    data: dict[str, Any] = {
        "code": error.code,
        "holder_pid": error.holder_pid,
        "home": str(home),
        "hint": f"agentkeep serve --home {home}",
    }
    refuse_stdio(message, data, stdin=sys.stdin.buffer, stdout=sys.stdout.buffer)
    raise click.exceptions.Exit(EXIT_STORE_LOCKED)
