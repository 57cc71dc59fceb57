"""The CLI sends the wire's ``AgentMessage`` (``--message-json``) with its
reference and data parts kept verbatim, and shows turns in that shape, directly and through
a daemon alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

QUICK = '{"id": "quick", "name": "Quick"}'
MESSAGE = {
    "role": "user",
    "parts": [
        {"type": "text", "text": "What is 2 + 2?"},
        {"type": "reference", "uri": "file:///notes.md", "name": "notes.md", "mediaType": None},
        {"type": "data", "name": "limits", "data": {"max_lines": 3}},
    ],
}


@pytest.mark.parametrize("through_daemon", [False, True], ids=["direct", "daemon"])
def test_session_send_and_talk_take_an_agent_message(
    tmp_path: Path, kit: Any, through_daemon: bool
) -> None:
    home = kit.make_home(tmp_path / "state")
    run = kit.invoker(home)
    assert run("agent", "create", "-", stdin=QUICK).exit_code == 0
    assert run("session", "start", "quick", "--id", "s1").exit_code == 0
    if through_daemon:
        with kit.daemon_on(home):
            _converse(run)
    else:
        _converse(run)


def _converse(run: Any) -> None:
    sent = run("session", "send", "s1", json.dumps(MESSAGE), "--message-json", "--wait")
    assert sent.exit_code == 0, sent.stderr
    turn = kit_turn(sent.stdout)
    assert turn["input"] == MESSAGE  # verbatim: not flattened to text
    assert turn["status"] == "completed"
    assert turn["result"]["message"]["role"] == "assistant"
    assert all(p["type"] == "text" for p in turn["result"]["message"]["parts"])
    assert turn["createdAt"].endswith("Z")

    talked = run("talk", "quick", "--message-json", "-", stdin=json.dumps(MESSAGE))
    assert talked.exit_code == 0, talked.stderr
    assert kit_turn(talked.stdout)["input"] == MESSAGE

    malformed = '{"role": "user", "parts": [{"type": "x"}]}'
    bad = run("session", "send", "s1", malformed, "--message-json")
    assert bad.exit_code == 2
    assert "AgentMessage" in bad.stderr

    events = json.loads(run("session", "events", "s1").stdout)["events"]
    accepted = next(e for e in events if e["type"] == "message.accepted")
    assert accepted["data"]["message"] == MESSAGE
    assert accepted["data"]["messageId"]  # camelCase keys, the data part's own keys kept


def kit_turn(stdout: str) -> Any:
    value = json.loads(stdout)
    return value.get("turn", value)
