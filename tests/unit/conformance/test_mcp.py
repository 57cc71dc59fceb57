"""Seed 002's MCP.md: ``agentkeep mcp`` as a real stdio subprocess (``--state-dir``), driven
by the ``mcp`` SDK's own client — the seven tools, ``talk_to_agent``'s legacy and new fields,
``conversation_id`` as the durable session id, ``run_in_background``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from tests.unit.conformance.seed002 import (
    DEFINITION_EXAMPLE,
    PROCESS_TIMEOUT,
    SEED_TOOLS,
    environment,
    is_agent_message,
    text_of,
)


async def call(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(name, arguments)
    text = "".join(getattr(block, "text", "") for block in result.content)
    assert not result.is_error, text
    assert isinstance(result.structured_content, dict)
    assert json.loads(text) == result.structured_content
    return result.structured_content


def test_the_seven_tools_and_talk_to_agent_over_stdio(tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "agentkeep.cli", "--state-dir", str(tmp_path / "state"), "mcp"],
        env=environment(),
        cwd=str(tmp_path),
    )
    errors = tmp_path / "mcp-stderr.log"

    async def main() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        with errors.open("w") as errlog, anyio.fail_after(PROCESS_TIMEOUT):
            async with Client(stdio_client(params, errlog=errlog)) as client:
                seen["tools"] = {t.name for t in (await client.list_tools()).tools}
                seen["created"] = await call(client, "agents_create", DEFINITION_EXAMPLE)
                seen["got"] = await call(client, "agents_get", {"agent_id": "reviewer"})
                seen["updated"] = await call(
                    client,
                    "agents_update",
                    {"agent_id": "reviewer", "patch": {"resources": {"skills": ["security"]}}},
                )
                await call(client, "agents_create", {"id": "calc", "instructions": "Compute."})
                # The legacy fields, as seed 002's Engine callers send them.
                seen["legacy"] = await call(
                    client,
                    "talk_to_agent",
                    {
                        "agent": "calc",
                        "prompt": "What is 12 * 7?",
                        "description": "multiply",
                    },
                )
                conversation = seen["legacy"]["conversation_id"]
                # The new fields and a structured message continue the same session.
                seen["structured"] = await call(
                    client,
                    "talk_to_agent",
                    {
                        "agent_id": "calc",
                        "session_id": conversation,
                        "message": {
                            "role": "user",
                            "parts": [
                                {"type": "text", "text": "And 6 * 7?"},
                                {"type": "data", "name": "ticket", "data": {"id": 7}},
                            ],
                        },
                    },
                )
                seen["background"] = await call(
                    client,
                    "talk_to_agent",
                    {
                        "agent": "calc",
                        "conversation_id": conversation,
                        "prompt": "What is 2 + 2?",
                        "run_in_background": True,
                    },
                )
                seen["deleted"] = await call(client, "agents_delete", {"agent_id": "calc"})
                seen["conversation"] = await call(
                    client, "agents_get_conversation", {"conversation_id": conversation}
                )
                seen["list"] = await call(client, "agents_list", {})
        return seen

    try:
        seen = anyio.run(main)
    except BaseException:
        print(errors.read_text(), file=sys.stderr)
        raise
    assert seen["tools"] >= SEED_TOOLS
    assert seen["created"]["definition"] == DEFINITION_EXAMPLE
    assert seen["got"]["id"] == "reviewer"
    assert seen["created"]["createdAt"].endswith("Z")  # ISO 8601, as REST shows it
    updated = seen["updated"].get("record", seen["updated"])
    assert updated["definition"]["resources"]["files"] == ["AGENTS.md"]

    legacy = seen["legacy"]
    assert legacy["status"] == "completed"
    assert "84" in legacy["answer"]
    result = legacy["turn"]["result"]["message"]
    is_agent_message(result, "assistant")
    assert "84" in text_of(result)
    structured = seen["structured"]
    assert structured["conversation_id"] == legacy["conversation_id"]
    assert structured["turn"]["input"]["parts"][1] == {
        "type": "data",
        "name": "ticket",
        "data": {"id": 7},
    }
    assert seen["background"]["turn"]["status"] in ("queued", "running")
    # Deleting an agent retains its session history.
    conversation = seen["conversation"]
    assert conversation["conversation_id"] == legacy["conversation_id"]
    assert len(conversation["turns"]) == 3
    assert "calc" not in {a["id"] for a in seen["list"]["agents"]}
    for event in conversation["events"]:
        assert event["createdAt"].endswith("Z"), event  # one timestamp format everywhere
