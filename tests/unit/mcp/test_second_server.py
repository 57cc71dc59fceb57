"""A second ``agentkeep mcp`` on a home another ``agentkeep mcp`` owns tells its MCP client why
the SDK's stdio client's connect fails with the reason and the way out
(``agentkeep serve``), not just a closed connection. Both servers are real processes."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

SRC = Path(__file__).resolve().parents[3] / "src"
PROCESS_TIMEOUT = 60.0


def _params(home: Path, cwd: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "agentkeep.cli", "mcp", "--state-dir", str(home)],
        env={"PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])},
        cwd=str(cwd),
    )


def _first(group: BaseExceptionGroup[MCPError]) -> MCPError:
    inner = group.exceptions[0]
    return inner if isinstance(inner, MCPError) else _first(inner)


def test_a_second_mcp_on_a_held_home_tells_the_client_why(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first_log = tmp_path / "first-stderr.log"
    second_log = tmp_path / "second-stderr.log"
    outcome: dict[str, object] = {}

    async def main() -> None:
        with (
            first_log.open("w") as first_err,
            second_log.open("w") as second_err,
            anyio.fail_after(PROCESS_TIMEOUT),
        ):
            async with Client(stdio_client(_params(home, tmp_path), errlog=first_err)) as first:
                # The first server owns the home (it answers: its store is open).
                listed = await first.list_tools()
                outcome["first_tools"] = len(listed.tools)
                try:
                    async with Client(stdio_client(_params(home, tmp_path), errlog=second_err)):
                        outcome["second"] = "connected"
                except* MCPError as group:  # the SDK's client raises it from a task group
                    outcome["second"] = _first(group)
                # The first one still serves.
                outcome["first_after"] = len((await first.list_tools()).tools)

    anyio.run(main)
    assert outcome["first_tools"] == outcome["first_after"]
    error = outcome["second"]
    assert isinstance(error, MCPError), error
    message = str(error)
    assert "in use by process" in message
    assert "agentkeep serve --home" in message
    assert error.error.data["code"] == "store_locked"
    assert isinstance(error.error.data["holder_pid"], int)
    assert "in use by process" in second_log.read_text()  # said on stderr too
