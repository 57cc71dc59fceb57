"""Running turns reached through a daemon: ``steer`` and ``abort`` (which exited 3 while a
daemon held the lock), ``session events --follow``, the MCP tools over ``HttpBackend``; and
how the CLI decides whether a daemon owns the home."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from tests.postgres_server import on_sqlite

from agentkeep.client import HttpBackend, client_token, find_daemon
from agentkeep.mcp import build_server

SLOW = '{"id": "slowpoke", "name": "Slow", "model": {"id": "slow/demo-1"}}'
QUICK = '{"id": "quick", "name": "Quick"}'
TIMEOUT = 30.0


def _wait_running(daemon: Any, session: str) -> None:
    """Until the session's turn is running (its ``turn.running`` event committed)."""
    subscription = daemon.system.subscribe(session)
    try:
        while subscription.next(timeout_seconds=TIMEOUT).type != "turn.running":
            pass
    finally:
        subscription.close()


def test_steer_and_cancel_reach_a_slow_turn_through_the_daemon(tmp_path: Path, kit: Any) -> None:
    home = kit.make_home(tmp_path / "state")
    run = kit.invoker(home)
    assert run("agent", "create", "-", stdin=SLOW).exit_code == 0
    with kit.daemon_on(home) as daemon:
        started = kit.stdout_json(run("talk", "slowpoke", "What is 12 * 7?", "--background"))
        session, turn_id = started["turn"]["sessionId"], started["turn"]["id"]
        assert started["turn"]["status"] in ("queued", "running")
        _wait_running(daemon, session)

        steered = run(
            "session", "send", "--steer", session, "Then count the words in 'a b c'.", "--id", "st1"
        )
        assert steered.exit_code == 0, steered.stderr
        joined = kit.stdout_json(steered)
        # A steer joins the running turn: that turn comes back, not a new one.
        assert (joined["turn"]["id"], joined["duplicate"], joined["answer"]) == (
            turn_id,
            False,
            None,
        )
        cancelled = run("session", "cancel", session)
        assert cancelled.exit_code == 0, cancelled.stderr
        assert kit.stdout_json(cancelled)["id"] == turn_id
        assert kit.stdout_json(cancelled)["status"] == "cancelled"

        turn = daemon.system.sessions.turn(session, turn_id)
        assert turn.status == "cancelled"
        accepted = [
            e.data.get("delivery")
            for e in daemon.system.events(session, limit=1000)
            if e.type == "message.accepted"
        ]
        assert accepted == ["send", "steer"]
        again = run("session", "cancel", session, json_mode=True)
        assert again.exit_code == 1  # nothing live is left to cancel
        assert json.loads(again.stderr)["error"]["code"] == "turn_state"


def test_session_cancel_and_follow_through_the_daemon(tmp_path: Path, kit: Any) -> None:
    home = kit.make_home(tmp_path / "state")
    run = kit.invoker(home)
    assert run("agent", "create", "-", stdin=SLOW).exit_code == 0
    with kit.daemon_on(home) as daemon:
        assert run("session", "start", "slowpoke", "--id", "slow1").exit_code == 0
        sent = kit.stdout_json(run("session", "send", "slow1", "What is 2 + 3?", "--key", "a"))
        turn_id = sent["turn"]["id"]
        _wait_running(daemon, "slow1")
        cancelled = run("session", "cancel", "slow1", "--turn", turn_id)
        assert cancelled.exit_code == 0, cancelled.stderr
        assert kit.stdout_json(cancelled)["status"] == "cancelled"
        followed = run("session", "events", "slow1", "--follow", "--turn", turn_id)
        assert followed.exit_code == 0, followed.stderr
        lines = [json.loads(line) for line in followed.stdout.splitlines()]
        assert lines[0]["type"] == "turn.queued"
        assert lines[-1]["type"] == "turn.cancelled"
        assert [e["sequence"] for e in lines] == sorted(e["sequence"] for e in lines)
        assert all(e["turnId"] == turn_id for e in lines)


def test_owner_only_commands_refuse_under_a_daemon_and_reads_still_work(
    tmp_path: Path, kit: Any
) -> None:
    home = kit.make_home(tmp_path / "state")
    run = kit.invoker(home)
    assert run("agent", "create", "-", stdin=QUICK).exit_code == 0
    with kit.daemon_on(home) as daemon:
        for args in (
            ("session", "start"),
            ("resume",),
            ("purge", "x"),
            ("session", "delete", "x"),
            ("demo",),
        ):
            refused = run(*args)
            assert refused.exit_code == 3, args
            error = json.loads(refused.stderr)["error"]
            assert error["code"] == "daemon_owns_home"
            assert str(daemon.system.home) in error["message"]
        assert run("session", "list").exit_code == 0  # read-only: no lock needed
        if on_sqlite():  # db check is SQLite's
            assert run("db", "check").exit_code == 0


def test_a_stale_daemon_file_is_ignored_and_said_at_v(tmp_path: Path, kit: Any) -> None:
    home = kit.make_home(tmp_path / "state")
    run = kit.invoker(home)
    assert run("agent", "create", "-", stdin=QUICK).exit_code == 0
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    (home / "daemon.json").write_text(
        json.dumps({"pid": int(gone.stdout), "url": "http://127.0.0.1:9"}), encoding="utf-8"
    )
    lookup = find_daemon(home)
    assert lookup.daemon is None
    assert "gone" in (lookup.stale or "")
    listed = run("-v", "agent", "list")
    assert listed.exit_code == 0
    assert [a["id"] for a in kit.stdout_json(listed)["agents"]] == ["quick"]
    assert "stale daemon file" in listed.stderr
    assert "stale" not in run("agent", "list").stderr  # only at -v
    # A live pid that does not hold the store lock (this test's) is not a daemon either.
    (home / "daemon.json").write_text(
        json.dumps({"pid": os.getpid(), "url": "http://127.0.0.1:9"}), encoding="utf-8"
    )
    lookup = find_daemon(home)
    assert lookup.daemon is None
    assert "does not hold the store lock" in (lookup.stale or "")
    assert run("agent", "list").exit_code == 0


def test_mcp_tools_over_the_daemon(tmp_path: Path, kit: Any) -> None:
    """The MCP server over ``HttpBackend`` (what `agentkeep mcp` serves when a daemon owns
    the home): talk in the background, read the conversation, errors as tool errors."""
    home = kit.make_home(tmp_path / "state")
    assert kit.invoker(home)("agent", "create", "-", stdin=QUICK).exit_code == 0
    with kit.daemon_on(home) as daemon:
        lookup = find_daemon(home)
        assert lookup.daemon is not None
        assert lookup.daemon.url == daemon.server.url
        backend = HttpBackend(lookup.daemon.url, client_token(home))
        server = build_server(backend)
        results: dict[str, Any] = {}

        async def main() -> None:
            with anyio.fail_after(TIMEOUT):
                async with Client(server, mode="legacy", raise_exceptions=True) as client:
                    talked = await client.call_tool(
                        "talk_to_agent",
                        {"agent_id": "quick", "message": "What is 12 * 7?"},
                    )
                    results["talk"] = talked.structured_content
                    conversation = talked.structured_content["conversation_id"]  # type: ignore[index]
                    read = await client.call_tool(
                        "agents_get_conversation", {"conversation_id": conversation}
                    )
                    results["read"] = read.structured_content
                    missing = await client.call_tool("agents_get", {"agent_id": "nope"})
                    results["missing"] = (missing.is_error, missing.content[0].text)  # type: ignore[union-attr]

        try:
            anyio.run(main)
        finally:
            backend.close()
    assert results["talk"]["answer"] == "12 * 7 = 84."
    assert results["read"]["answer"] == "12 * 7 = 84."
    assert results["missing"][0] is True
    assert results["missing"][1].startswith("unknown_definition")


def test_a_wrong_token_is_a_clear_error(tmp_path: Path, kit: Any, monkeypatch: Any) -> None:
    home = kit.make_home(tmp_path / "state")
    run = kit.invoker(home)
    assert run("agent", "create", "-", stdin=QUICK).exit_code == 0
    with kit.daemon_on(home):
        monkeypatch.setenv("AGENTKEEP_DAEMON_TOKEN", "not-the-token-0123456789")
        refused = run("agent", "list")
    assert refused.exit_code == 1
    error = json.loads(refused.stderr)["error"]
    assert error["code"] == "unauthorized"
    assert "AGENTKEEP_DAEMON_TOKEN" in error["hint"]


def test_talk_to_an_agent_id_goes_through_the_daemon(tmp_path: Path, kit: Any) -> None:
    """Today's ``talk AGENT_ID`` (an agent made without a definition) works under a daemon:
    the agent is a session, continued through the daemon's REST API."""
    home = kit.make_home(tmp_path / "state")
    run = kit.invoker(home)
    created = run("session", "start", "--id", "plain")
    assert created.exit_code == 0, created.stderr
    with kit.daemon_on(home) as daemon:
        talked = run("talk", "plain", "What is 2 + 3?")
        assert talked.exit_code == 0, talked.stderr
        value = kit.stdout_json(talked)
        assert value["answer"] == "2 + 3 = 5."
        assert value["turn"]["sessionId"] == "plain"
        assert daemon.system.sessions.turns("plain")[-1].status == "completed"
        missing = run("talk", "nothing", "hello")
        assert missing.exit_code == 4
        assert json.loads(missing.stderr)["error"]["code"] == "unknown_definition"
