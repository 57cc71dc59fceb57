"""`agentkeep mcp` as a real stdio subprocess, driven by the SDK's client."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from tests.unit.mcp.conftest import call

from agentkeep.persistence import Store

SRC = Path(__file__).resolve().parents[3] / "src"
#: The whole session (a Python start, the SDK's imports, one turn of the demo model) is
#: bounded by this; it takes about 3 s on an idle machine.
PROCESS_TIMEOUT = 60.0


def test_talk_in_the_background_then_read_the_conversation_over_stdio(tmp_path: Path) -> None:
    home = tmp_path / "home"  # does not exist yet: the server creates the store
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "agentkeep.cli", "mcp", "--home", str(home)],
        # The whole environment (the SDK passes only a few variables of its own): on the
        # PostgreSQL pass, the server's store is where this process looks for it.
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                p for p in [str(SRC), os.environ.get("PYTHONPATH", "")] if p
            ),
        },
        cwd=str(tmp_path),
    )
    stderr_path = tmp_path / "server-stderr.log"

    async def main() -> dict[str, Any]:
        with stderr_path.open("w") as errlog, anyio.fail_after(PROCESS_TIMEOUT):
            async with Client(stdio_client(params, errlog=errlog)) as client:
                names = {tool.name for tool in (await client.list_tools()).tools}
                assert {"talk_to_agent", "agents_get_conversation", "cancel_turn"} <= names
                await call(client, "agents_create", {"id": "calc", "instructions": "Compute."})
                started = await call(
                    client,
                    "talk_to_agent",
                    {"agent": "calc", "prompt": "What is 12 * 7?", "run_in_background": True},
                )
                assert started["answer"] is None
                assert started["started_session"] is True
                conversation = started["conversation_id"]
                # Poll the durable conversation until its turn is terminal (bounded by the
                # fail_after above; each poll is a real round trip to the server).
                while True:
                    read = await call(
                        client, "agents_get_conversation", {"conversation_id": conversation}
                    )
                    (turn,) = read["turns"]
                    if turn["status"] not in ("queued", "running", "cancelling"):
                        return {"started": started, "read": read}
                    await anyio.sleep(0.05)

    try:
        outcome = anyio.run(main)
    except BaseException:
        print(stderr_path.read_text(), file=sys.stderr)  # the server's logs, to diagnose
        raise
    read = outcome["read"]
    (turn,) = read["turns"]
    assert turn["id"] == outcome["started"]["turn"]["id"]
    assert turn["status"] == "completed"
    assert read["session"]["agentId"] == "calc"
    # The default provider is the CLI's local demo model: it really computes with its tool.
    assert read["answer"] is not None
    assert "84" in read["answer"]
    turn_events = [e["type"] for e in read["events"] if e["turnId"] == turn["id"]]
    assert set(turn_events[:2]) == {"message.accepted", "turn.queued"}
    assert turn_events[-1] == "turn.completed"
    # The server closed the store when the client closed stdin: the lock is free and the
    # turn is durable.
    store = Store.open(home)
    try:
        stored = store.read(lambda tx: tx.turns.read(read["conversation_id"], turn["id"]))
    finally:
        store.close()
    assert stored is not None
    assert stored.status == "completed"


def test_a_home_held_by_another_process_exits_3_with_nothing_on_stdout(tmp_path: Path) -> None:
    home = tmp_path / "home"
    holder = Store.open(home)  # this process owns the store
    try:
        done = subprocess.run(
            [sys.executable, "-m", "agentkeep.cli", "mcp", "--home", str(home)],
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join(
                    p for p in [str(SRC), os.environ.get("PYTHONPATH", "")] if p
                ),
            },
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=PROCESS_TIMEOUT,
            check=False,
        )
    finally:
        holder.close()
    assert done.returncode == 3, done.stderr
    assert done.stdout == ""  # stdout is the protocol's: the error goes to stderr
    assert str(os.getpid()) in done.stderr
