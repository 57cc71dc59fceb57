"""``agentkeep mcp`` (a real stdio subprocess, the official MCP SDK's client) on one worker's
home, while two ``agentkeep serve --partitions`` workers split the store: its tools reach
sessions of the partitions the OTHER worker owns (the worker's front forwards the writes to
the owner; the reads come from the store), so MCP, like REST, works against any worker."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from tests.unit.cluster.test_serve_workers import COUNT, TOKEN, Worker, post, split, workers
from tests.unit.subprocesses import AGENTKEEP

from agentkeep.partitions import partition_of

__all__ = ["workers"]  # the fixture, shared with the serve tests

SRC = Path(__file__).resolve().parents[3] / "src"
PROCESS_TIMEOUT = 90.0  # a Python start, the SDK's imports, two turns through two workers


def owned_by(partitions: set[int], prefix: str) -> str:
    """The first id ``prefix-N`` whose partition is among ``partitions``."""
    return next(
        name
        for n in itertools.count()
        if partition_of(name := f"{prefix}-{n}", COUNT) in partitions
    )


def test_mcp_on_one_worker_talks_to_a_session_the_other_worker_owns(
    workers: Callable[..., Worker], tmp_path: Path
) -> None:
    a, b = workers("a"), workers("b")
    _, theirs = split(a, b)
    assert post(b.client, "/v1/agents", {"id": "helper"}).status_code == 201
    # A session of b's partitions (a client-chosen id hashes there), created through b.
    session = owned_by(theirs, "far")
    made = post(b.client, "/v1/sessions", {"agentId": "helper", "sessionId": session})
    assert made.status_code == 201, made.text
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "agentkeep.cli", "mcp", "--home", str(tmp_path / "a")],
        env={
            "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
            "PATH": os.environ.get("PATH", ""),
            "AGENTKEEP_DAEMON_TOKEN": TOKEN,
        },
        cwd=str(tmp_path),
    )
    stderr_path = tmp_path / "mcp-stderr.log"

    async def main() -> dict[str, Any]:
        found: dict[str, Any] = {}
        with stderr_path.open("w") as errlog, anyio.fail_after(PROCESS_TIMEOUT):
            async with Client(stdio_client(params, errlog=errlog)) as client:
                # A registry write through a: partition 0's owner makes it, whichever it is.
                created = await client.call_tool("agents_create", {"id": "calc"})
                assert not created.is_error, created.content
                talked = await client.call_tool(
                    "talk_to_agent",
                    {"session_id": session, "message": "hello", "idempotency_key": "k1"},
                )
                assert not talked.is_error, talked.content
                found["talk"] = talked.structured_content
                again = await client.call_tool(
                    "talk_to_agent",
                    {"session_id": session, "message": "hello", "idempotency_key": "k1"},
                )
                assert not again.is_error, again.content
                found["again"] = again.structured_content
                read = await client.call_tool("agents_get_conversation", {"session_id": session})
                assert not read.is_error, read.content
                found["read"] = read.structured_content
        return found

    try:
        found = anyio.run(main)
    except BaseException:
        print(stderr_path.read_text(), file=sys.stderr)
        raise
    talk, again = found["talk"], found["again"]
    assert talk["conversation_id"] == session
    assert talk["status"] == "completed"
    assert talk["answer"]
    # The key keeps its meaning through the front: the retry names the same turn.
    assert again["duplicate"] is True
    assert again["turn"]["id"] == talk["turn"]["id"]
    assert found["read"]["answer"] == talk["answer"]
    # The owner (b) ran it: its REST shows the one completed turn, and the definition.
    turns = b.client.get(f"/v1/sessions/{session}/turns").json()["turns"]
    assert [t["status"] for t in turns] == ["completed"]
    assert b.client.get("/v1/agents/calc").status_code == 200


def test_a_second_worker_on_the_same_home_is_refused_naming_the_first(
    workers: Callable[..., Worker], postgres_url: str, tmp_path: Path
) -> None:
    """A worker holds its home's lock file for its life: the CLI and ``agentkeep mcp`` find
    it there (above), and a second process serving that home is refused
    (``daemon_owns_home``, exit 3), naming the first worker's pid."""
    a = workers("a")
    refused = subprocess.run(
        [
            *AGENTKEEP,
            *("--home", str(tmp_path / "a"), "--json", "serve", "--port", "0"),
            *("--database", postgres_url, "--partitions", str(COUNT)),
        ],
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
        env={**os.environ, "AGENTKEEP_DAEMON_TOKEN": TOKEN},
    )
    assert refused.returncode == 3, refused.stderr
    error = json.loads(refused.stderr.strip().splitlines()[-1])["error"]
    assert error["code"] == "daemon_owns_home"
    assert str(a.process.pid) in error["message"]
