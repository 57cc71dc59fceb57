"""``agentkeep mcp`` as a real stdio subprocess on a home a daemon owns: a thin client of the
daemon (it could not open the store: the daemon holds its lock)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

SRC = Path(__file__).resolve().parents[3] / "src"
PROCESS_TIMEOUT = 60.0  # a Python start, the SDK's imports, one turn of the demo model


def test_agentkeep_mcp_is_a_client_of_the_daemon(tmp_path: Path, kit: Any) -> None:
    home = kit.make_home(tmp_path / "state")
    env = {
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
        "PATH": os.environ.get("PATH", ""),
    }
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "agentkeep.cli", "mcp", "--home", str(home)],
        env=env,
        cwd=str(tmp_path),
    )
    stderr_path = tmp_path / "server-stderr.log"

    async def main() -> dict[str, Any]:
        with stderr_path.open("w") as errlog, anyio.fail_after(PROCESS_TIMEOUT):
            async with Client(stdio_client(params, errlog=errlog)) as client:
                created = await client.call_tool(
                    "agents_create", {"id": "calc", "instructions": "Compute."}
                )
                assert not created.is_error, created.content
                talked = await client.call_tool(
                    "talk_to_agent", {"agent_id": "calc", "message": "What is 12 * 7?"}
                )
                assert not talked.is_error, talked.content
                assert isinstance(talked.structured_content, dict)
                return talked.structured_content

    with kit.daemon_on(home) as daemon:
        try:
            talked = anyio.run(main)
        except BaseException:
            print(stderr_path.read_text(), file=sys.stderr)
            raise
        # The daemon's own system made the definition and ran the turn.
        assert daemon.system.registry.get("calc", include_deleted=False).id == "calc"
        turns = daemon.system.sessions.turns(talked["conversation_id"])
        assert [t.status for t in turns] == ["completed"]
    assert talked["answer"] == "12 * 7 = 84."
