"""``agentkeep mcp``: serve the home's agents to an MCP client over stdio (``docs/mcp.md``).

When a daemon owns the home, the server is a thin client of its REST API
(:class:`~agentkeep.client.HttpBackend`). Otherwise the server owns the store while it runs
(it holds the home's lock, like ``resume``): it opens
the system with the CLI's providers (``providers.toml``; the local demo model by default) and
resumes every agent that owes work, then serves until the client closes stdin. stdout is the
protocol's; logs go to stderr.
"""

from __future__ import annotations

import dataclasses

import anyio
import click

from agentkeep.cli.context import CliState, pass_state
from agentkeep.cli.driver_specs import drivers_after
from agentkeep.cli.runtime import open_system
from agentkeep.cli.transport import daemon_of, http_backend
from agentkeep.mcp.backend import SystemBackend
from agentkeep.persistence.store import HOME_ENV, resolve_home


@click.command("mcp")
@click.option(
    "--home",
    type=click.Path(),
    default=None,
    help=f"The state directory (as `agentkeep --home`; default: ${HOME_ENV}, else ./.agentkeep).",
)
@drivers_after()
@pass_state
def mcp(state: CliState, home: str | None) -> None:
    """Serve MCP over stdio: seed 002's agents_* tools, talk_to_agent, steer_agent, cancel_turn.

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
    with open_system(target, resume=True, create=True) as (system, _):
        anyio.run(serve_stdio, build_server(SystemBackend(system)))
