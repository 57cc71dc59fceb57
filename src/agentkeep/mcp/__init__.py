"""``agentkeep mcp``: seed 002's MCP tools on the official MCP SDK (``docs/mcp.md``).

- :mod:`~agentkeep.mcp.types`: the tools' arguments and results (msgspec), their schemas;
- :mod:`~agentkeep.mcp.errors`: what the tools refuse themselves;
- :mod:`~agentkeep.mcp.backend`: :class:`Backend`, the operations the tools need, and
  :class:`SystemBackend`, over an ``AgentSystem`` this process owns;
- :mod:`~agentkeep.mcp.tools`: the nine tools, over a :class:`Backend`;
- :mod:`~agentkeep.mcp.server`: the SDK server, tool errors, stdio.
"""

from agentkeep.mcp.backend import Backend, SystemBackend
from agentkeep.mcp.server import build_server, serve_stdio
from agentkeep.mcp.tools import TOOLS, ToolSpec

__all__ = ["TOOLS", "Backend", "SystemBackend", "ToolSpec", "build_server", "serve_stdio"]
