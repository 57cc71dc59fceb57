"""``agentkeep mcp``: serve the home's agents to an MCP client over stdio (``docs/mcp.md``).

The server owns the store while it runs (it holds the home's lock, like ``resume``): it opens
the system with the CLI's providers (``providers.toml``; the local demo model by default) and
resumes every agent that owes work, then serves until the client closes stdin. stdout is the
protocol's; logs go to stderr.
"""

from __future__ import annotations

import anyio
import click

from agentkeep.cli.context import CliState, pass_state
from agentkeep.cli.runtime import Home, open_system
from agentkeep.mcp import SystemBackend, build_server, serve_stdio
from agentkeep.persistence.store import HOME_ENV, resolve_home


@click.command("mcp")
@click.option(
    "--home",
    type=click.Path(),
    default=None,
    help=f"The state directory (as `agentkeep --home`; default: ${HOME_ENV}, else ./.agentkeep).",
)
@pass_state
def mcp(state: CliState, home: str | None) -> None:
    """Serve MCP over stdio: seed 002's agents_* tools, talk_to_agent, steer_agent, cancel_turn.

    Point an MCP client at `agentkeep mcp --home DIR`. The server owns DIR's store while it
    runs (other commands on DIR then exit 3) and creates it if it does not exist yet.
    """
    target = state.home if home is None else Home(path=resolve_home(home))
    with open_system(target, resume=True, create=True) as (system, _):
        anyio.run(serve_stdio, build_server(SystemBackend(system)))
