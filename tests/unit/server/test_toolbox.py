"""The daemon's own system (the CLI's providers and demo tools, as ``agentkeep serve`` opens
it) over REST: a definition naming ``calculator`` is accepted and its sessions run only
``calculator``; an empty ``toolIds`` runs every demo tool; an unknown id is a 422 naming the
field and the known ids (not a refusal that says "registered: none")."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agentkeep.cli.runtime import Home, open_system
from agentkeep.cli.tools import LEDGER_FILE
from agentkeep.server import RunningServer, ServeOptions

from .conftest import AUTH, TIMEOUT, TOKEN

QUESTION = 'What is 12 * 7? And count the words in "a crash is only a pause".'


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[httpx.Client, Path]]:
    home = tmp_path / "state"
    with open_system(Home(path=home), resume=True, create=True) as (system, _):
        server = RunningServer(system, ServeOptions(port=0, token=TOKEN)).start()
        try:
            with httpx.Client(base_url=server.url, headers=AUTH, timeout=TIMEOUT) as client:
                yield client, home
        finally:
            server.stop()


def _ran(home: Path, session_id: str) -> list[str]:
    lines = (home / LEDGER_FILE).read_text(encoding="utf-8").splitlines()
    return [run["tool"] for run in map(json.loads, lines) if run["agent_id"] == session_id]


def _ask(client: httpx.Client, definition: dict[str, object]) -> str:
    assert client.post("/v1/agents", json=definition).status_code == 201
    started = client.post("/v1/sessions", json={"agentId": definition["id"]})
    assert started.status_code == 201, started.text
    session_id: str = started.json()["id"]
    sent = client.post(f"/v1/sessions/{session_id}/messages", json={"message": QUESTION})
    assert sent.status_code == 200, sent.text
    assert sent.json()["turn"]["status"] == "completed", sent.text
    return session_id


def test_naming_calculator_offers_and_runs_only_calculator(
    daemon: tuple[httpx.Client, Path],
) -> None:
    client, home = daemon
    session_id = _ask(client, {"id": "calc", "toolbox": {"toolIds": ["calculator"]}})
    assert _ran(home, session_id) == ["calculator"]  # word_count was asked for, never run
    events = client.get(f"/v1/sessions/{session_id}/events").json()["events"]
    assert any("84" in json.dumps(e["data"]) for e in events if e["type"] == "tool.result")


def test_an_empty_list_runs_every_demo_tool(daemon: tuple[httpx.Client, Path]) -> None:
    client, home = daemon
    session_id = _ask(client, {"id": "all"})
    assert sorted(_ran(home, session_id)) == ["calculator", "word_count"]


def test_an_unknown_tool_id_is_a_422_naming_the_field_and_the_known_ids(
    daemon: tuple[httpx.Client, Path],
) -> None:
    client, _ = daemon
    definition = {"id": "typo", "toolbox": {"toolIds": ["calculater"]}}
    assert client.post("/v1/agents", json=definition).status_code == 201
    started = client.post("/v1/sessions", json={"agentId": "typo"})
    error = started.json()["error"]
    assert (started.status_code, error["code"]) == (422, "invalid_session_config"), started.text
    assert error["details"]["field"] == "toolbox.toolIds[0]"
    assert "calculator" in error["message"]
    assert "word_count" in error["message"]
