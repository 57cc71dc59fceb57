"""``agentkeep compact`` on an agent with no messages writes no summary."""

from __future__ import annotations

import json
from typing import Any


def test_compacting_an_empty_agent_writes_no_summary(invoke: Any) -> None:
    assert invoke("session", "start", "--id", "empty").exit_code == 0

    compacted = invoke("session", "compact", "empty")

    assert compacted.exit_code == 0, compacted.stderr
    transcript = invoke("session", "transcript", "empty", json_mode=True)
    assert json.loads(transcript.stdout)["messages"] == []
    shown = json.loads(invoke("session", "show", "empty", json_mode=True).stdout)["runtime"]
    assert (shown["messages"], shown["state"]) == (0, "idle")
