"""``agentkeep mcp``: the MCP tools on the official MCP SDK (``docs/mcp.md``).

- :mod:`~agentkeep.mcp.types`: the tools' arguments and results (msgspec), their schemas;
- :mod:`~agentkeep.mcp.errors`: what the tools refuse themselves;
- :mod:`~agentkeep.mcp.backend`: :class:`Backend`, the operations the tools need, and
  :class:`SystemBackend`, over an ``AgentSystem`` this process owns;
- :mod:`~agentkeep.mcp.tools`: the ten tools, over a :class:`Backend`;
- :mod:`~agentkeep.mcp.server`: the SDK server, tool errors, stdio.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentkeep.mcp.backend import Backend, SystemBackend
from agentkeep.mcp.tools import TOOLS, ToolSpec

if TYPE_CHECKING:
    from agentkeep.mcp.server import build_server, serve_stdio


def __getattr__(name: str) -> Any:
    # The SDK server is imported on first use: importing the SDK costs more than the rest of
    # the CLI together, and every command but `agentkeep mcp` reaches this package (for the
    # Backend protocol it shares with the MCP tools).
    if name in ("build_server", "serve_stdio"):
        from agentkeep.mcp import server

        return getattr(server, name)
    raise AttributeError(f"module 'agentkeep.mcp' has no attribute {name!r}")


__all__ = ["TOOLS", "Backend", "SystemBackend", "ToolSpec", "build_server", "serve_stdio"]
