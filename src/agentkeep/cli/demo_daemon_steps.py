"""The steps of ``agentkeep demo --daemon`` (``agentkeep.cli.demo_daemon`` says what it shows).

Imported only when the command runs, so the other commands never pay for httpx.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from agentkeep.cli.context import CliState
from agentkeep.cli.demo_daemon_client import Daemon, demo_failed, pid_alive, start_daemon
from agentkeep.cli.demo_daemon_verify import Observed, epoch_ms, judge, summarize
from agentkeep.cli.narrator import Narrator
from agentkeep.cli.output import Console, command_line
from agentkeep.client.sse import response_frames
from agentkeep.server import DAEMON_FILE, TOKEN_FILE

PROVIDER = "slow"
LATENCY_SECONDS = 0.15
# The demo model, slowed down: a pause before each streamed event keeps the turn in flight
# for a few seconds, long enough to kill the daemon in the middle of it.
PROVIDERS_TOML = f"""\
# Written by `agentkeep demo --daemon`: the local demo model, slowed down so that a turn is
# still in flight when the demo kills the daemon.
[providers.{PROVIDER}]
kind = "gym"
class = "demo"
latency_seconds = {LATENCY_SECONDS}
"""
DEFINITION = {
    "id": "calculator",
    "name": "Slow calculator",
    "description": "agentkeep demo --daemon: arithmetic and word counts, slowly.",
    "model": {"id": f"{PROVIDER}/demo-1"},
}
MESSAGE = 'What is 1234 * 5678? And count the words in "a crash is only a pause".'
IDEMPOTENCY_KEY = "demo-daemon-turn-1"
# The kill point, read from the stream: the turn's first tool result is committed; the
# answer (seconds of streaming at LATENCY_SECONDS per event) is still to come.
TRIGGER_TYPE = "tool.result"
START_TIMEOUT_SECONDS = 20.0
HTTP_TIMEOUT_SECONDS = 15.0
STOP_TIMEOUT_SECONDS = 10.0


def _client(daemon: Daemon) -> httpx.Client:
    # trust_env=False: a proxy configured in the environment must not see loopback traffic.
    return httpx.Client(
        base_url=daemon.url,
        headers=daemon.headers,
        timeout=HTTP_TIMEOUT_SECONDS,
        trust_env=False,
    )


def _expect(response: httpx.Response, *statuses: int) -> dict[str, Any]:
    if response.status_code not in statuses:
        raise demo_failed(
            f"{response.request.method} {response.request.url.path} answered "
            f"{response.status_code} (expected {' or '.join(map(str, statuses))}): "
            f"{response.text[:300]}"
        )
    body: dict[str, Any] = response.json()
    return body


@dataclass
class _Stream:
    """Follows the session's stream over any number of connections, recording into ``seen``."""

    say: Callable[[str], None]
    seen: Observed
    started: float = field(default_factory=time.monotonic)
    completed: bool = False
    deltas: int = 0  # live text deltas seen (ephemeral frames without an id)

    @property
    def last_id(self) -> int | None:
        return self.seen.received[-1] if self.seen.received else None

    def follow(
        self, daemon: Daemon, session_id: str, on_event: Callable[[dict[str, Any]], None]
    ) -> str | None:
        """Read the stream (from ``Last-Event-ID`` if any event arrived already) until the
        turn completes; returns None then, or why the connection ended before."""
        headers = {} if self.last_id is None else {"Last-Event-ID": str(self.last_id)}
        path = f"/v1/sessions/{session_id}/events/stream"
        try:
            with _client(daemon) as client, client.stream("GET", path, headers=headers) as response:
                if response.status_code != 200:
                    response.read()
                    _expect(response, 200)
                for frame in response_frames(response):
                    event: dict[str, Any] = json.loads(frame.data)
                    if event["sequence"] == 0 and frame.id is None:
                        self.deltas += 1  # a live text delta: ephemeral, no id, not replayed
                        continue
                    if frame.id != str(event["sequence"]):
                        raise demo_failed(f"SSE id {frame.id} ≠ sequence {event['sequence']}.")
                    self._record(event)
                    on_event(event)
                    if self.completed:
                        return None
        except httpx.TransportError as error:
            return f"{type(error).__name__}: {error}"
        return "the server ended the stream"

    def _record(self, event: dict[str, Any]) -> None:
        seen = self.seen
        seen.received.append(int(event["sequence"]))
        if event.get("turnId") == seen.turn_id and str(event["type"]).startswith("turn."):
            seen.statuses.append(str(event["data"].get("status")))
            if event["type"] == "turn.completed":
                self.completed = True
                seen.completed_at_ms = epoch_ms(event["createdAt"])
        elapsed = time.monotonic() - self.started
        self.say(f"{f'+{elapsed:.2f}s':>7}  ← id {event['sequence']:<3} {summarize(event)}")


@dataclass
class _Run:
    """One run: where, which session and turn, and what was observed (for the verdict)."""

    home: Path
    session_id: str = ""
    turn: dict[str, Any] = field(default_factory=dict)
    killed_pid: int = 0
    seen: Observed = field(default_factory=Observed)


def _create(daemon: Daemon, run: _Run, say: Callable[[str], None]) -> None:
    with _client(daemon) as client:
        definition = _expect(client.post("/v1/agents", json=DEFINITION), 201)
        say(f"POST /v1/agents → 201: definition {definition['id']!r}, revision 1")
        session = _expect(client.post("/v1/sessions", json={"agentId": definition["id"]}), 201)
        run.session_id = session["id"]
        say(f"POST /v1/sessions → 201: session {run.session_id}")


def _send(daemon: Daemon, run: _Run) -> httpx.Response:
    with _client(daemon) as client:
        return client.post(
            f"/v1/sessions/{run.session_id}/messages",
            json={"message": MESSAGE, "wait": False},
            headers={"Idempotency-Key": IDEMPOTENCY_KEY},
        )


def _kill_mid_turn(daemon: Daemon, run: _Run, stream: _Stream, narrator: Narrator) -> None:
    seen = run.seen

    def on_event(event: dict[str, Any]) -> None:
        if run.killed_pid or event["type"] != TRIGGER_TYPE or event.get("turnId") != seen.turn_id:
            return
        seen.before_kill = len(seen.received)
        seen.completed_before_kill = stream.completed
        daemon.kill()
        # Every commit of the dead daemon is older than this (it is reaped).
        run.killed_pid, seen.kill_ms = daemon.pid, int(time.time() * 1000)
        narrator.say(
            f"✗ SIGKILL → daemon pid {daemon.pid} at the turn's first tool result: mid-turn, "
            "the answer still to come"
        )

    ended = stream.follow(daemon, run.session_id, on_event)
    if not run.killed_pid:
        raise demo_failed(
            f"The stream ended before the kill point (a {TRIGGER_TYPE} of the turn): "
            f"{ended or 'the turn completed first'}."
        )
    if ended is not None:
        narrator.say(
            f"the stream dropped ({ended.split(':')[0]}); last id received: {stream.last_id}"
        )
    late = len(seen.received) - seen.before_kill
    if late:
        narrator.say(f"({late} of those were already in the socket when the daemon died)")
    stale_file = run.home / DAEMON_FILE
    if not stale_file.exists():
        narrator.say(f"{DAEMON_FILE} is gone")
        return
    stale = json.loads(stale_file.read_text(encoding="utf-8"))
    gone = not pid_alive(int(stale["pid"]))
    narrator.say(
        f"{DAEMON_FILE} still names pid {stale['pid']}"
        + (", which is gone: a client checks the pid" if gone else " (still running?!)")
    )


def _resend(daemon: Daemon, run: _Run, say: Callable[[str], None]) -> None:
    seen = run.seen
    response = _send(daemon, run)
    seen.resend = _expect(response, 200, 202)
    turn = seen.resend["turn"]
    say(
        f"POST …/messages (Idempotency-Key: {IDEMPOTENCY_KEY}) → {response.status_code}: "
        f"turn {turn['id']} ({turn['status']}), duplicate: {str(seen.resend['duplicate']).lower()}"
    )
    with _client(daemon) as client:
        turns = _expect(client.get(f"/v1/sessions/{run.session_id}/turns"), 200)
        seen.turn_count = len(turns["turns"])
        # The ledger as the daemon holds it, to compare the stream with.
        events = _expect(
            client.get(f"/v1/sessions/{run.session_id}/events", params={"limit": 1000}), 200
        )
        seen.ledger = list(events["events"])


def _run(run: _Run, narrator: Narrator, daemons: list[Daemon]) -> None:
    say = narrator.say
    narrator.step(1, "Start the daemon: agentkeep serve --port 0 (a real process)")
    first = start_daemon(run.home, run.home / "daemon-1.log", timeout_seconds=START_TIMEOUT_SECONDS)
    daemons.append(first)
    say(f"pid {first.pid}, listening at {first.url} (from {DAEMON_FILE}); token from {TOKEN_FILE}")

    narrator.step(2, "Create a definition and a session over REST:")
    say(f"model {PROVIDER}/demo-1: the local demo model, {LATENCY_SECONDS} s per streamed event")
    _create(first, run, say)

    narrator.step(3, "Send a turn, without waiting:")
    say(f"you: {MESSAGE}")
    response = _send(first, run)
    run.turn = _expect(response, 202)["turn"]
    run.seen.turn_id = run.turn["id"]
    say(
        f"POST …/messages (Idempotency-Key: {IDEMPOTENCY_KEY}, wait: false) → 202: "
        f"turn {run.turn['id']} ({run.turn['status']})"
    )

    narrator.step(4, "Follow the event stream, and SIGKILL the daemon in the middle of the turn:")
    stream = _Stream(say=say, seen=run.seen)
    _kill_mid_turn(first, run, stream, narrator)

    narrator.step(5, "Restart the daemon on the same state directory:")
    second = start_daemon(
        run.home, run.home / "daemon-2.log", timeout_seconds=START_TIMEOUT_SECONDS
    )
    daemons.append(second)
    same = "the same token" if second.token == first.token else "a different token?!"
    say(f"pid {second.pid}, listening at {second.url}; {same} ({TOKEN_FILE})")

    narrator.step(6, f"Reconnect with Last-Event-ID: {stream.last_id} — the stream resumes:")
    ended = stream.follow(second, run.session_id, lambda event: None)
    if ended is not None:
        raise demo_failed(f"The resumed stream ended before the turn completed: {ended}.")

    narrator.step(7, "Send the same message with the same Idempotency-Key again:")
    _resend(second, run, say)

    narrator.step(8, "Stop the daemon (SIGTERM), and check:")
    run.seen.stop_status = second.terminate(STOP_TIMEOUT_SECONDS)
    run.seen.daemon_file_left = (run.home / DAEMON_FILE).exists()


def run_demo(home: Path, state: CliState) -> bool:
    """Run the demo in ``home`` (new or empty), narrating on stdout (stderr with ``--json``,
    the summary then on stdout); returns whether every check passed.

    Raises:
        CliError: a step failed outright (the daemon did not start, a request failed, the
            stream ended before the kill point); no daemon is left running.
    """
    started = time.monotonic()
    (home / "providers.toml").write_text(PROVIDERS_TOML, encoding="utf-8")
    console = Console(sys.stderr if state.json_mode else None)
    narrator = Narrator(console)
    console.line("agentkeep demo --daemon: the daemon's event stream survives a SIGKILL")
    console.line(f"state directory: {home}")
    run = _Run(home=home)
    daemons: list[Daemon] = []
    try:
        _run(run, narrator, daemons)
    except (httpx.HTTPError, ValueError, KeyError, OSError) as error:
        # The daemon answered nonsense or went away outside the planned kill.
        raise demo_failed(
            f"Talking to the daemon failed: {type(error).__name__}: {error}",
            hint=f"See the daemon's log in {home} (daemon-1.log, daemon-2.log).",
        ) from error
    finally:
        for daemon in daemons:
            daemon.close()  # a daemon left running by a failed step
    verdict = judge(run.seen)
    for line in verdict.lines:
        narrator.say(line)
    console.line("")
    elapsed = time.monotonic() - started
    if verdict.ok:
        console.line(
            "demo --daemon: PASS — the stream resumed across the SIGKILL with nothing lost or "
            f"repeated, and the turn completed once ({elapsed:.1f}s)"
        )
    else:
        console.line("demo --daemon: FAIL — see the FAIL lines above")
    console.line("")
    console.line("Inspect it yourself:")
    for command in (
        ("session", "show", run.session_id),
        ("session", "transcript", run.session_id),
        ("db", "check"),
    ):
        console.line(f"  {command_line(home, *command)}")
    console.line(f"  {command_line(home, 'serve')}   # then, from another shell:")
    console.line(
        f'  curl -N -H "Authorization: Bearer $(cat {home / TOKEN_FILE})" '
        f"http://127.0.0.1:4317/v1/sessions/{run.session_id}/events/stream"
    )
    if state.json_mode:
        state.output.result(
            {
                "ok": verdict.ok,
                "home": str(home),
                "session_id": run.session_id,
                "turn_id": run.turn.get("id"),
                "killed_pid": run.killed_pid,
                "received": run.seen.received,
                "checks": verdict.checks,
            }
        )
    return verdict.ok
