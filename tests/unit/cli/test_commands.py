"""The admin commands through click's runner: exit codes, JSON shape, readable output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import Result

AGENT_FIELDS = {"id", "parent_id", "metadata", "created_at", "state"}
SHOW_FIELDS = {
    "id",
    "parent_id",
    "created_at",
    "metadata",
    "config",
    "settings",
    "state",
    "owed",
    "queued",
    "notices",
    "pending_calls",
    "context_tokens",
    "messages",
    "children",
}
DELIVERY_FIELDS = {"agent_id", "id", "delivery", "created", "waited", "state", "answer"}


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_create_prints_the_new_id_and_list_shows_it(invoke: Any) -> None:
    created = as_json(invoke("create", "--id", "alpha", "--title", "Alpha", json_mode=True))
    assert created["id"] == "alpha"
    assert created["metadata"] == {"title": "Alpha"}

    listed = as_json(invoke("list", json_mode=True))
    assert [a["id"] for a in listed["agents"]] == ["alpha"]
    assert set(listed["agents"][0]) == AGENT_FIELDS
    assert listed["agents"][0]["state"] == "idle"
    assert listed["agents"][0]["created_at"].endswith("Z")  # ISO 8601, as every surface

    readable = invoke("list")
    assert "alpha" in readable.stdout
    assert "Alpha" in readable.stdout


def test_create_reads_a_json_config_file_and_flags_override_its_metadata(
    invoke: Any, tmp_path: Path
) -> None:
    config = tmp_path / "agent.json"
    config.write_text(json.dumps({"metadata": {"title": "from file", "team": "red"}}))
    assert (
        invoke("create", "--id", "beta", "--config", str(config), "--title", "flag").exit_code == 0
    )
    shown = as_json(invoke("show", "beta", json_mode=True))
    assert shown["metadata"] == {"title": "flag", "team": "red"}


def test_send_queues_durably_without_running_and_resume_answers_it(invoke: Any) -> None:
    invoke("create", "--id", "gamma")
    queued = as_json(invoke("send", "gamma", "What is 6 * 7?", "--id", "msg1", json_mode=True))
    assert set(queued) == DELIVERY_FIELDS
    assert queued == {
        "agent_id": "gamma",
        "id": "msg1",
        "delivery": "send",
        "created": True,
        "waited": False,
        "state": "accepted",  # durable; directly, it runs on `resume` (a daemon runs it now)
        "answer": None,
    }
    shown = as_json(invoke("show", "gamma", json_mode=True))
    assert set(shown) == SHOW_FIELDS
    assert shown["state"] == "owes_work"
    assert [q["id"] for q in shown["queued"]] == ["msg1"]
    assert shown["queued"][0]["text"] == "What is 6 * 7?"

    repeated = as_json(invoke("send", "gamma", "What is 6 * 7?", "--id", "msg1", json_mode=True))
    assert repeated["created"] is False  # idempotent delivery: the same id is not queued twice
    said = invoke("send", "gamma", "What is 6 * 7?", "--id", "msg1")
    assert said.stdout == "already queued message msg1 for gamma (send)\n"
    assert "nothing runs it until `agentkeep resume`" in said.stderr  # directly only

    resumed = as_json(invoke("resume", json_mode=True))
    assert resumed["resumed"] == ["gamma"]
    assert resumed["agents"] == [{"id": "gamma", "state": "idle"}]
    transcript = as_json(invoke("transcript", "gamma", json_mode=True))
    roles = [m["role"] for m in transcript["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]  # the demo model calls a tool
    assert transcript["messages"][-1]["content"][0]["text"] == "6 * 7 = 42."


def test_send_wait_runs_the_agent_and_prints_its_answer(invoke: Any) -> None:
    invoke("create", "--id", "delta")
    answered = as_json(invoke("send", "delta", "What is 2 + 2?", "--wait", json_mode=True))
    assert answered["waited"] is True
    assert answered["answer"] == "2 + 2 = 4."
    assert answered["state"] == "idle"
    again = invoke("send", "delta", 'count the words in "to be or not"', "--wait")
    assert again.stdout.strip() == '"to be or not" has 4 words.'


def test_steer_uses_the_steering_queue(invoke: Any) -> None:
    invoke("create", "--id", "eps")
    steered = as_json(invoke("steer", "eps", "be brief", json_mode=True))
    assert steered["delivery"] == "steer"
    shown = as_json(invoke("show", "eps", json_mode=True))
    assert shown["queued"][0]["queue"] == "steering"


def test_talk_streams_tool_calls_and_the_answer_as_json_lines(invoke: Any) -> None:
    invoke("create", "--id", "zeta")
    result = invoke(
        "talk",
        "zeta",
        'What is 6 * 7? And count the words in "one two three".',
        "--provider",
        "demo",
        "--model",
        "demo-1",
        json_mode=True,
    )
    assert result.exit_code == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds.count("tool_call") == 2
    assert {e["name"] for e in events if e["event"] == "tool_finished"} == {
        "calculator",
        "word_count",
    }
    assert kinds.count("text_delta") > 1  # streamed, not printed at the end
    done = events[-1]
    assert done["event"] == "done"
    assert done["answer"] == '6 * 7 = 42. "one two three" has 3 words.'


def test_talk_prints_readable_streamed_output(invoke: Any) -> None:
    invoke("create", "--id", "eta")
    result = invoke("talk", "eta", 'note "buy bread"', "--provider", "demo", "--model", "demo-1")
    assert result.exit_code == 0, result.stderr
    assert '→ save_note({"text":"buy bread"})' in result.stdout
    assert "✓ save_note → saved to notes.txt" in result.stdout
    assert 'assistant: I saved the note "buy bread".' in result.stdout


def test_compact_replaces_the_history_with_a_summary(invoke: Any) -> None:
    invoke("create", "--id", "theta")
    invoke("send", "theta", "hi", "--wait")
    compacted = as_json(invoke("compact", "theta", json_mode=True))
    assert compacted["compacted"] is True
    assert compacted["messages"] == 1
    transcript = as_json(invoke("transcript", "theta", json_mode=True))
    assert [m["role"] for m in transcript["messages"]] == ["compaction"]


def test_abort_of_an_idle_agent_reports_nothing_to_abort(invoke: Any) -> None:
    invoke("create", "--id", "iota")
    aborted = as_json(invoke("abort", "iota", json_mode=True))
    assert aborted == {"agent_id": "iota", "aborted": False, "state": "idle"}


def test_abort_of_an_agent_owing_work_leaves_it_settled(invoke: Any) -> None:
    invoke("create", "--id", "kappa")
    invoke("send", "kappa", "hi")
    aborted = as_json(invoke("abort", "kappa", json_mode=True))
    assert aborted["aborted"] is True
    assert aborted["state"] in ("idle", "owes_work")
    assert as_json(invoke("db", "check", json_mode=True))["ok"] is True


def test_delete_releases_the_agent(invoke: Any) -> None:
    invoke("create", "--id", "lam")
    assert as_json(invoke("delete", "lam", json_mode=True)) == {"id": "lam", "deleted": True}
    assert as_json(invoke("list", json_mode=True))["agents"] == []
    assert invoke("show", "lam").exit_code == 4


def test_resume_with_nothing_owed_says_so(invoke: Any) -> None:
    invoke("create", "--id", "mu")
    assert invoke("resume").stdout.strip() == "no agent owed work"


def test_chaos_run_replays_one_seed_of_a_suite(invoke: Any) -> None:
    result = invoke("chaos", "run", "--suite", "queues", "--seed", "1")
    assert result.exit_code == 0, result.stdout
    summary = result.stdout.splitlines()[-1].split()
    assert summary[:3] == ["queues", "1", "0"]  # suite, seeds, failed
