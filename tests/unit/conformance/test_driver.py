"""Seed 002's DRIVERS.md: its example driver (``seed002_driver.py``, a line-by-line port)
loaded from the command line — ``--drivers FILE`` for ``serve``, ``AGENTKEEP_DRIVERS`` with
``module:attribute`` for a direct ``talk`` — runs turns unchanged."""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.conformance.seed002 import (
    agentkeep,
    environment,
    is_agent_message,
    serving,
    text_of,
)

DRIVER_FILE = Path(__file__).with_name("seed002_driver.py")
REPO = Path(__file__).resolve().parents[3]
DEFINITION = {"id": "native", "name": "Native", "driver": {"id": "my-runtime", "config": {}}}


def test_the_example_driver_runs_through_the_daemon(tmp_path: Path) -> None:
    with (
        serving(tmp_path / "state", "--drivers", str(DRIVER_FILE)) as daemon,
        daemon.client() as api,
    ):
        assert api.post("/v1/agents", json=DEFINITION).status_code == 201
        session = api.post("/v1/sessions", json={"agentId": "native"}).json()
        path = f"/v1/sessions/{session['id']}/messages"
        first = api.post(path, json={"message": "Review the diff.", "wait": True}).json()
        second = api.post(path, json={"message": "And the tests.", "wait": True}).json()
        shown = api.get(f"/v1/sessions/{session['id']}").json()
        events = api.get(f"/v1/sessions/{session['id']}/events").json()["events"]

    for sent in (first, second):
        assert sent["turn"]["status"] == "completed", sent
        is_agent_message(sent["turn"]["result"]["message"], "assistant")
        assert sent["turn"]["result"]["metadata"] == {"provider": "example"}
    assert text_of(first["turn"]["result"]["message"]) == "Done: Review the diff. (after [])"
    # The second turn's history: the first turn's input, then the message it produced.
    assert text_of(second["turn"]["result"]["message"]) == (
        "Done: And the tests. (after ['user', 'assistant'])"
    )
    assert shown["driverSessionId"] == "native-session-id"
    messages = [e["data"]["message"] for e in events if e["type"] == "message"]
    assert [m["role"] for m in messages] == ["assistant", "assistant"]
    assert messages[1] == second["turn"]["result"]["message"]


def test_the_example_driver_runs_a_direct_talk_from_the_environment(tmp_path: Path) -> None:
    home = tmp_path / "state"
    definition = tmp_path / "native.json"
    definition.write_text(json.dumps(DEFINITION))
    env = environment(AGENTKEEP_DRIVERS="tests.unit.conformance.seed002_driver:driver")
    env["PYTHONPATH"] = f"{REPO}:{env['PYTHONPATH']}"
    created = agentkeep(
        "--state-dir", str(home), "--json", "agent", "create", str(definition), env=env
    )
    assert created.returncode == 0, created.stderr
    talked = agentkeep("--state-dir", str(home), "--json", "talk", "native", "Hello.", env=env)
    assert talked.returncode == 0, talked.stderr
    turn = json.loads(talked.stdout)["turn"]
    assert turn["status"] == "completed"
    assert text_of(turn["result"]["message"]) == "Done: Hello. (after [])"


def test_a_bad_driver_spec_is_one_line_and_exit_2(tmp_path: Path) -> None:
    home = tmp_path / "state"
    definition = tmp_path / "native.json"
    definition.write_text(json.dumps(DEFINITION))
    assert agentkeep("--state-dir", str(home), "agent", "create", str(definition)).returncode == 0
    for spec in ("no_such_module_anywhere:driver", str(tmp_path / "missing.py"), "json:dumps"):
        done = agentkeep("--state-dir", str(home), "--drivers", spec, "talk", "native", "Hi.")
        assert done.returncode == 2, (spec, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert spec.split(":")[0].rsplit("/", 1)[-1] in done.stderr
