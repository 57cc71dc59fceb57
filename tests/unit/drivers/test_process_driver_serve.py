"""Drivers by name and the process driver through real processes:
``agentkeep serve``, ``talk`` and ``mcp``
load drivers with ``--drivers`` / ``AGENTKEEP_DRIVERS`` (a module, a module:attr, a file),
and the process driver's harness never outlives its turn -- not even a SIGKILLed daemon."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import httpx
import pytest
from httpx_sse import connect_sse
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from tests.unit.conformance.seed002 import Daemon, serving
from tests.unit.subprocesses import AGENTKEEP

from .process_helpers import (
    ECHO,
    PYTHON,
    alive,
    echo_definition,
    group_members,
    group_of,
    linux_only,
    text_of,
    wait_until,
)

pytestmark = linux_only

TIMEOUT = 30.0


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "AGENTKEEP_DRIVERS"}
    return {**env, "AGENTKEEP_DAEMON_TOKEN": "", **extra}


def _start_session(client: httpx.Client, definition: dict[str, object]) -> str:
    client.post("/v1/agents", json=definition).raise_for_status()
    response = client.post("/v1/sessions", json={"agentId": definition["id"]})
    response.raise_for_status()
    return str(response.json()["id"])


def _harness_pid(daemon: Daemon, session_id: str) -> int:
    """The harness's pid from its ``harness.started`` event, read off the SSE stream."""
    with (
        daemon.client() as client,
        connect_sse(client, "GET", f"/v1/sessions/{session_id}/events/stream") as source,
    ):
        for frame in source.iter_sse():
            event = json.loads(frame.data) if frame.data else {}
            if event.get("type") == "harness.started":
                return int(event["data"]["pid"])
    raise AssertionError("the stream ended before harness.started")


def _gated(tmp_path: Path) -> dict[str, object]:
    gate = tmp_path / "gate"
    os.mkfifo(gate)  # nobody opens it: the harness blocks until it is killed
    definition = echo_definition("gated", gate=str(gate))
    driver = definition["driver"]
    assert isinstance(driver, dict)
    driver["config"]["command"] = ["/bin/sh", "-c", 'sleep 300 & exec "$0" "$1"', PYTHON, ECHO]
    return definition


def test_sigkill_of_the_daemon_mid_turn_leaves_the_turn_interrupted_and_no_harness(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    with (
        serving(home, after=("--drivers", "agentkeep.drivers.process"), env=_env()) as daemon,
        daemon.client() as client,
    ):
        session_id = _start_session(client, _gated(tmp_path))
        sent = client.post(
            f"/v1/sessions/{session_id}/messages",
            json={"message": "hold on", "wait": False, "idempotencyKey": "k1"},
        )
        assert sent.status_code == 202, sent.text
        turn_id = sent.json()["turn"]["id"]
        pid = _harness_pid(daemon, session_id)
        pgid = group_of(pid)
        assert alive(pid)
        assert pgid not in (os.getpgid(0), daemon.process.pid)
        wait_until(lambda: len(group_members(pgid)) >= 3, what="guard, harness and sleep")

        daemon.process.kill()  # SIGKILL: no cleanup runs in the daemon
        daemon.process.wait(TIMEOUT)

        wait_until(lambda: not alive(pid), what="the harness to die with the daemon")
        wait_until(lambda: not group_members(pgid), what="its process group to be gone")

    with (
        serving(home, after=("--drivers", "agentkeep.drivers.process"), env=_env()) as daemon,
        daemon.client() as client,
    ):
        turn = client.get(f"/v1/sessions/{session_id}/turns/{turn_id}").json()
        assert turn["status"] == "interrupted"
        assert turn["error"]["code"] == "interrupted"
        again = client.post(
            f"/v1/sessions/{session_id}/messages",
            json={"message": "hold on", "idempotencyKey": "k1"},
        )
        assert again.json()["turn"]["status"] == "interrupted"  # the key never runs twice


def test_cancel_over_rest_kills_the_harness_process_group(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = _env(AGENTKEEP_DRIVERS="agentkeep.drivers.process:ProcessDriver")
    with serving(home, env=env) as daemon, daemon.client() as client:
        session_id = _start_session(client, _gated(tmp_path))
        sent = client.post(
            f"/v1/sessions/{session_id}/messages", json={"message": "hi", "wait": False}
        )
        assert sent.status_code == 202, sent.text
        pid = _harness_pid(daemon, session_id)
        pgid = group_of(pid)
        wait_until(lambda: len(group_members(pgid)) >= 3, what="guard, harness and sleep")

        cancelled = client.post(f"/v1/sessions/{session_id}/cancel", json={})

        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["status"] == "cancelled"
        wait_until(lambda: not group_members(pgid), what="the process group to be gone")


def _driver_file(tmp_path: Path) -> Path:
    """A driver file: the process driver with a fixed command, under its own id (``make``:
    a factory; ``driver``: what the file alone names)."""
    path = tmp_path / "my_driver.py"
    path.write_text(
        textwrap.dedent(
            f"""
            from agentkeep.drivers.process import ProcessDriver

            def make():
                return ProcessDriver("echo-file", command=[{PYTHON!r}, {ECHO!r}])

            driver = make()
            """
        )
    )
    return path


@pytest.mark.parametrize(
    ("before", "after", "variable", "driver_id"),
    [
        # --drivers FILE:attr (a factory), before the command
        (["--drivers", "{file}:make"], [], None, "echo-file"),
        # serve --drivers module:attr (a class)
        ([], ["--drivers", "agentkeep.drivers.process:ProcessDriver"], None, "process"),
        # AGENTKEEP_DRIVERS=FILE (its `driver`)
        ([], [], "{file}", "echo-file"),
        # AGENTKEEP_DRIVERS=module (its `driver`)
        ([], [], "agentkeep.drivers.process", "process"),
    ],
    ids=["flag-file-attr", "serve-flag-module-attr", "env-file", "env-module"],
)
def test_serve_runs_a_turn_with_drivers_from_the_command_line(
    tmp_path: Path,
    before: list[str],
    after: list[str],
    variable: str | None,
    driver_id: str,
) -> None:
    home = tmp_path / "home"
    driver_file = str(_driver_file(tmp_path))
    env = _env() if variable is None else _env(AGENTKEEP_DRIVERS=variable.format(file=driver_file))
    args = [a.format(file=driver_file) for a in before]
    definition = echo_definition("filed", driver=driver_id)
    with serving(home, *args, after=after, env=env) as daemon, daemon.client() as client:
        session_id = _start_session(client, definition)
        done = client.post(
            f"/v1/sessions/{session_id}/messages", json={"message": "over http", "wait": True}
        )
        assert done.status_code == 200, done.text
        turn = done.json()["turn"]
        assert turn["status"] == "completed", turn
        assert text_of(turn["result"]["message"]) == "echo: over http"
        types = [
            e["type"] for e in client.get(f"/v1/sessions/{session_id}/events").json()["events"]
        ]
        assert "harness.started" in types
        assert "message" in types


def test_talk_runs_a_turn_with_a_driver_file_and_refuses_a_bad_spec(tmp_path: Path) -> None:
    home = tmp_path / "home"
    driver_file = _driver_file(tmp_path)
    definition = json.dumps({"id": "filed", "driver": {"id": "echo-file"}})
    created = subprocess.run(
        [*AGENTKEEP, "--home", str(home), "agent", "create", "-"],
        input=definition,
        capture_output=True,
        text=True,
        env=_env(),
        timeout=TIMEOUT,
    )
    assert created.returncode == 0, created.stderr
    talked = subprocess.run(
        [
            *AGENTKEEP,
            "--home",
            str(home),
            "--drivers",
            f"{driver_file}:make",
            "talk",
            "filed",
            "hi",
        ],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=TIMEOUT,
    )
    assert talked.returncode == 0, talked.stderr
    assert "echo: hi" in talked.stdout

    bad = subprocess.run(
        [*AGENTKEEP, "--home", str(home), "talk", "filed", "hi"],
        capture_output=True,
        text=True,
        env=_env(AGENTKEEP_DRIVERS=f"{driver_file}:nothing"),
        timeout=TIMEOUT,
    )
    assert bad.returncode == 2
    assert bad.stderr.splitlines() == [
        f'error: AGENTKEEP_DRIVERS "{driver_file}:nothing": the file {driver_file} has no '
        'attribute "nothing"'
    ]


def test_mcp_over_stdio_runs_a_turn_with_drivers_after_its_name(tmp_path: Path) -> None:
    """`agentkeep mcp --home H --drivers agentkeep.drivers.process`, driven by the SDK's
    stdio client: talk_to_agent answers through the echo harness."""
    home = tmp_path / "home"
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "agentkeep.cli",
            "mcp",
            "--home",
            str(home),
            "--drivers",
            "agentkeep.drivers.process",
        ],
        env=_env(),
        cwd=str(tmp_path),
    )

    async def main() -> dict[str, object]:
        with (tmp_path / "stderr.log").open("w") as errlog, anyio.fail_after(60):
            async with Client(stdio_client(params, errlog=errlog)) as client:
                created = await client.call_tool("agents_create", echo_definition())
                assert not created.is_error, created
                talked = await client.call_tool(
                    "talk_to_agent", {"agent_id": "echo", "message": "over mcp"}
                )
                assert not talked.is_error, talked
                assert isinstance(talked.structured_content, dict)
                return talked.structured_content

    result = anyio.run(main)
    assert result["answer"] == "echo: over mcp"
