"""An MCP client connected in-process (the SDK's memory transport, JSON-RPC framing and the
initialize handshake) to ``build_server`` over a real store and a scripted model."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client

import agentkeep as ak
from agentkeep.mcp import SystemBackend, build_server

#: Every wait in these tests is bounded by this.
TIMEOUT = 20.0


class World:
    """A system over a scripted model (``local``/``gym-1``) and the MCP server over it."""

    def __init__(self, home: Path) -> None:
        self.model = ak.ScriptedModel()
        providers = ak.Providers()
        providers.add("local", self.model, kind="gym")
        self.system = ak.AgentSystem.open(
            home, providers=providers, provider="local", model="gym-1"
        )
        self.server = build_server(SystemBackend(self.system, cancel_timeout_seconds=TIMEOUT))

    def session(self, body: Callable[[Client], Awaitable[None]]) -> None:
        """Run ``body`` with a client connected to the server (legacy mode: the stream loop
        with the initialize handshake, as over stdio), within :data:`TIMEOUT`."""

        async def main() -> None:
            with anyio.fail_after(TIMEOUT):
                async with Client(self.server, mode="legacy", raise_exceptions=True) as client:
                    await body(client)

        anyio.run(main)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path / "state")
    yield w
    w.system.close(timeout_seconds=10)


async def call(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Call a tool that must succeed; its structured result (the text block says the same)."""
    result = await client.call_tool(name, arguments)
    assert not result.is_error, _text(result)
    assert isinstance(result.structured_content, dict)
    assert json.loads(_text(result)) == result.structured_content
    return result.structured_content


async def call_error(client: Client, name: str, arguments: dict[str, Any]) -> str:
    """Call a tool that must fail with a tool error; its text (``code: message``)."""
    result = await client.call_tool(name, arguments)
    assert result.is_error, result
    assert result.structured_content is None
    return _text(result)


def _text(result: types.CallToolResult) -> str:
    (block,) = result.content
    assert isinstance(block, types.TextContent)
    return block.text
