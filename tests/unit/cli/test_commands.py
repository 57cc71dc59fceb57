"""The `session` commands through click's runner: exit codes, JSON shape, readable output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import Result
from tests.postgres_server import on_sqlite

SESSION_FIELDS = {
    "id",
    "agentId",
    "agentRevisionId",
    "agentRevision",
    "status",
    "driverSessionId",
    "metadata",
    "createdAt",
    "updatedAt",
    "archivedAt",
    "owes",
}
RUNTIME_FIELDS = {
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
SENT_FIELDS = {"turn", "duplicate", "answer"}


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_start_without_a_definition_prints_the_session_and_list_shows_it(invoke: Any) -> None:
    created = as_json(
        invoke("session", "start", "--id", "alpha", "--title", "Alpha", json_mode=True)
    )
    assert created["id"] == "alpha"
    assert created["agentId"] is None  # no definition
    assert created["metadata"] == {"title": "Alpha"}

    listed = as_json(invoke("session", "list", json_mode=True))
    assert [a["id"] for a in listed["sessions"]] == ["alpha"]
    assert set(listed["sessions"][0]) == SESSION_FIELDS
    assert (listed["sessions"][0]["status"], listed["sessions"][0]["owes"]) == ("active", None)
    assert listed["sessions"][0]["createdAt"].endswith("Z")  # ISO 8601, as every surface

    readable = invoke("session", "list")
    assert "alpha" in readable.stdout
    assert "Alpha" in readable.stdout


def test_start_reads_a_json_config_file_and_flags_override_its_metadata(
    invoke: Any, tmp_path: Path
) -> None:
    config = tmp_path / "agent.json"
    config.write_text(json.dumps({"metadata": {"title": "from file", "team": "red"}}))
    assert (
        invoke(
            "session", "start", "--id", "beta", "--config", str(config), "--title", "flag"
        ).exit_code
        == 0
    )
    shown = as_json(invoke("session", "show", "beta", json_mode=True))
    assert shown["session"]["metadata"] == {"title": "flag", "team": "red"}
    assert shown["runtime"]["metadata"] == {"title": "flag", "team": "red"}


def test_send_queues_durably_without_running_and_resume_answers_it(invoke: Any) -> None:
    invoke("session", "start", "--id", "gamma")
    queued = as_json(
        invoke("session", "send", "gamma", "What is 6 * 7?", "--id", "msg1", json_mode=True)
    )
    assert set(queued) == SENT_FIELDS
    assert (queued["duplicate"], queued["answer"]) == (False, None)
    # durable; directly, it runs on `resume` (a daemon runs it now)
    assert (queued["turn"]["sessionId"], queued["turn"]["status"]) == ("gamma", "queued")
    shown = as_json(invoke("session", "show", "gamma", json_mode=True))
    assert set(shown) == {"session", "turns", "events", "runtime"}
    assert set(shown["runtime"]) == RUNTIME_FIELDS
    assert shown["runtime"]["state"] == "owes_work"
    assert [q["id"] for q in shown["runtime"]["queued"]] == ["msg1"]
    assert shown["runtime"]["queued"][0]["text"] == "What is 6 * 7?"
    assert [t["id"] for t in shown["turns"]] == [queued["turn"]["id"]]

    repeated = as_json(
        invoke("session", "send", "gamma", "What is 6 * 7?", "--id", "msg1", json_mode=True)
    )
    # idempotent delivery: the same id is not queued twice
    assert (repeated["duplicate"], repeated["turn"]["id"]) == (True, queued["turn"]["id"])
    said = invoke("session", "send", "gamma", "What is 6 * 7?", "--id", "msg1")
    turn = queued["turn"]["id"]
    assert said.stdout == f"turn {turn} of session gamma: queued (already accepted)\n"
    assert "nothing runs it until `agentkeep resume`" in said.stderr  # directly only

    resumed = as_json(invoke("resume", json_mode=True))
    assert resumed["resumed"] == ["gamma"]
    assert resumed["agents"] == [{"id": "gamma", "state": "idle"}]
    transcript = as_json(invoke("session", "transcript", "gamma", json_mode=True))
    roles = [m["role"] for m in transcript["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]  # the demo model calls a tool
    assert transcript["messages"][-1]["content"][0]["text"] == "6 * 7 = 42."


def test_send_wait_runs_the_agent_and_prints_its_answer(invoke: Any) -> None:
    invoke("session", "start", "--id", "delta")
    answered = as_json(
        invoke("session", "send", "delta", "What is 2 + 2?", "--wait", json_mode=True)
    )
    assert answered["answer"] == "2 + 2 = 4."
    assert answered["turn"]["status"] == "completed"
    again = invoke("session", "send", "delta", 'count the words in "to be or not"', "--wait")
    assert again.stdout.strip() == '"to be or not" has 4 words.'


def test_steer_uses_the_steering_queue(invoke: Any) -> None:
    invoke("session", "start", "--id", "eps")
    steered = as_json(invoke("session", "send", "--steer", "eps", "be brief", json_mode=True))
    assert steered["turn"]["status"] == "queued"
    shown = as_json(invoke("session", "show", "eps", json_mode=True))
    assert shown["runtime"]["queued"][0]["queue"] == "steering"


def test_talk_streams_tool_calls_and_the_answer_as_json_lines(invoke: Any) -> None:
    invoke("session", "start", "--id", "zeta")
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
    invoke("session", "start", "--id", "eta")
    result = invoke("talk", "eta", 'note "buy bread"', "--provider", "demo", "--model", "demo-1")
    assert result.exit_code == 0, result.stderr
    assert '→ save_note({"text":"buy bread"})' in result.stdout
    assert "✓ save_note → saved to notes.txt" in result.stdout
    assert 'assistant: I saved the note "buy bread".' in result.stdout


def test_compact_replaces_the_history_with_a_summary(invoke: Any) -> None:
    invoke("session", "start", "--id", "theta")
    invoke("session", "send", "theta", "hi", "--wait")
    compacted = as_json(invoke("session", "compact", "theta", json_mode=True))
    assert compacted["compacted"] is True
    assert compacted["messages"] == 1
    transcript = as_json(invoke("session", "transcript", "theta", json_mode=True))
    assert [m["role"] for m in transcript["messages"]] == ["compaction"]


def test_cancel_of_an_idle_session_says_there_is_nothing_to_cancel(invoke: Any) -> None:
    invoke("session", "start", "--id", "iota")
    refused = invoke("session", "cancel", "iota", json_mode=True)
    assert refused.exit_code == 1
    error = json.loads(refused.stderr)["error"]
    assert error["code"] == "turn_state"
    assert "no live turn to cancel: it is idle" in error["message"]


def test_cancel_of_a_queued_turn_leaves_the_session_settled(invoke: Any) -> None:
    invoke("session", "start", "--id", "kappa")
    invoke("session", "send", "kappa", "hi")
    cancelled = as_json(invoke("session", "cancel", "kappa", json_mode=True))
    assert cancelled["status"] == "cancelled"
    shown = as_json(invoke("session", "show", "kappa", json_mode=True))
    assert shown["runtime"]["state"] in ("idle", "owes_work")
    if on_sqlite():  # db check is SQLite's
        assert as_json(invoke("db", "check", json_mode=True))["ok"] is True


def test_delete_releases_the_session(invoke: Any) -> None:
    invoke("session", "start", "--id", "lam")
    assert as_json(invoke("session", "delete", "lam", json_mode=True)) == {
        "id": "lam",
        "deleted": True,
    }
    assert as_json(invoke("session", "list", json_mode=True))["sessions"] == []
    assert invoke("session", "show", "lam").exit_code == 4


def test_resume_with_nothing_owed_says_so(invoke: Any) -> None:
    invoke("session", "start", "--id", "mu")
    assert invoke("resume").stdout.strip() == "no agent owed work"


def test_chaos_run_replays_one_seed_of_a_suite(invoke: Any) -> None:
    result = invoke("chaos", "run", "--suite", "queues", "--seed", "1")
    assert result.exit_code == 0, result.stdout
    summary = result.stdout.splitlines()[-1].split()
    assert summary[:3] == ["queues", "1", "0"]  # suite, seeds, failed
