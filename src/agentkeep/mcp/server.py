"""The MCP server: the official SDK's low-level ``Server`` with agentkeep's tools.

The SDK owns the protocol (versions, handshake, JSON-RPC framing, stdio); this module lists
the tools (:data:`~agentkeep.mcp.tools.TOOLS`) with their msgspec schemas and runs a call:

- the arguments are decoded with the tool's argument type, so a missing, unknown or mistyped
  field is refused naming it;
- the handler runs in a worker thread (the backend blocks: store reads, waits for turns), so
  the event loop keeps serving other requests — ``cancel_turn`` while ``talk_to_agent``
  waits;
- the result is returned as ``structuredContent`` (validated by SDK clients against the
  listed ``outputSchema``) and, for clients that read only text, as its JSON in a text block;
- an error the caller can act on (every ``AgentkeepError``, a decode error, a wait that
  timed out) is a **tool error** (``isError``, ``code: message``), never a protocol error, so
  the model reads it. Only an unknown tool name is a protocol error (``INVALID_PARAMS``), as
  the MCP specification says.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
from collections.abc import Sequence
from typing import IO, Any

import anyio
import anyio.to_thread
import mcp_types as types
import msgspec
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from agentkeep.errors import AgentkeepError
from agentkeep.logs import get_logger
from agentkeep.mcp.backend import Backend
from agentkeep.mcp.errors import InvalidArgumentsError
from agentkeep.mcp.tools import TOOLS, ToolSpec
from agentkeep.mcp.types import decode_arguments, schema_of, to_structured

SERVER_NAME = "agentkeep"
INSTRUCTIONS = (
    "Durable agents. An agent is a versioned definition (agents_*); a conversation with it "
    "is a durable session whose id is the conversation_id talk_to_agent returns. Pass that "
    "conversation_id back to continue the same conversation. Every message is a turn; give "
    "idempotency_key to retry a talk safely."
)

_log = get_logger(__name__)


def tool_listing(tools: Sequence[ToolSpec] = TOOLS) -> list[types.Tool]:
    """What ``tools/list`` returns: each tool with its input and output schemas."""
    return [
        types.Tool(
            name=spec.name,
            title=spec.title,
            description=spec.description,
            input_schema=schema_of(spec.arguments),
            output_schema=schema_of(spec.result),
            annotations=types.ToolAnnotations(
                title=spec.title,
                read_only_hint=spec.read_only,
                destructive_hint=spec.destructive,
                idempotent_hint=spec.idempotent,
                open_world_hint=False,
            ),
        )
        for spec in tools
    ]


def build_server(backend: Backend, *, tools: Sequence[ToolSpec] = TOOLS) -> Server[Any]:
    """An MCP server whose tools run over ``backend``; serve it with :func:`serve_stdio` (or
    any of the SDK's transports, or in-process with ``mcp.Client(server)``)."""
    listing = tool_listing(tools)
    by_name = {spec.name: spec for spec in tools}

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listing)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        spec = by_name.get(params.name)
        if spec is None:
            raise MCPError(
                types.INVALID_PARAMS,
                f'Unknown tool "{params.name}"; the tools are: {", ".join(by_name)}.',
            )
        return await anyio.to_thread.run_sync(
            functools.partial(run_tool, spec, backend, params.arguments),
            abandon_on_cancel=True,
        )

    return Server(
        SERVER_NAME,
        version=_version(),
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def run_tool(
    spec: ToolSpec, backend: Backend, arguments: dict[str, Any] | None
) -> types.CallToolResult:
    """Decode, run and encode one call; every error the caller can act on is a tool error."""
    try:
        try:
            args = decode_arguments(arguments, spec.arguments)
        except msgspec.ValidationError as error:
            raise InvalidArgumentsError(f"{spec.name}: {error}") from None
        result = spec.handler(backend, args)
    except AgentkeepError as error:
        return tool_error(error.code, str(error))
    except TimeoutError as error:
        return tool_error("timeout", str(error))
    except ValueError as error:  # a library check on a plain value (a page size, …)
        return tool_error("invalid_arguments", str(error))
    structured = to_structured(result)
    text = msgspec.json.encode(structured).decode()
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=structured
    )


def tool_error(code: str, message: str) -> types.CallToolResult:
    """A tool error the model reads: ``code: message``."""
    _log.info("mcp_tool_error", code=code, error=message)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{code}: {message}")], is_error=True
    )


async def serve_stdio(server: Server[Any]) -> None:
    """Serve ``server`` on this process's stdin and stdout until stdin closes."""
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


#: The JSON-RPC error code of :func:`refuse_stdio` (the implementation-defined server-error
#: range of JSON-RPC 2.0, where the MCP SDK puts its own ``CONNECTION_CLOSED``).
SERVER_UNAVAILABLE = -32001


def refuse_stdio(
    message: str, data: dict[str, Any], *, stdin: IO[bytes], stdout: IO[bytes]
) -> None:
    """Tell an MCP client over stdio why this server cannot serve it, then end.

    Every request (``initialize`` first: the client's connect fails with ``message``, which
    the SDK's client raises as its ``MCPError``) is answered with a JSON-RPC error carrying
    ``message`` and ``data``; notifications are ignored; it returns when the client closes
    stdin. Without it a client would only see its connection close.
    """
    for line in stdin:
        try:
            request = json.loads(line)
        except ValueError:
            continue
        if not isinstance(request, dict) or "id" not in request or "method" not in request:
            continue  # a notification or a response: nothing to answer
        error = {"code": SERVER_UNAVAILABLE, "message": message, "data": data}
        reply = {"jsonrpc": "2.0", "id": request["id"], "error": error}
        stdout.write(json.dumps(reply).encode() + b"\n")
        stdout.flush()


def _version() -> str:
    try:
        return importlib.metadata.version("agentkeep")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - a source checkout
        return "0"
