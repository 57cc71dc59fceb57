"""``agentkeep demo``: what agentkeep is for, in well under a minute, with nothing configured.

1. Create an agent on the local demo model with three real tools (``calculator`` and
   ``word_count`` are durable; ``save_note`` appends to a file and is not).
2. Talk to it, streaming the answer and showing tool calls as they run.
3. Continue the conversation in a child process, and SIGKILL that process in the middle of
   a tool batch: ``save_note`` has written its note, the durable tools have run, no result of
   the batch is committed, and another message waits in the queue.
4. Show what the crash left on disk (``db check`` passes: the batch is durable and owed).
5. Restart on the same state directory: the batch resumes, the durable tools run again, the
   note is *not* written again, and both messages are answered.
6. Verify it from the durable state and the tool ledger, and print how to inspect it.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import click

from agentkeep.cli.admin import read_agent
from agentkeep.cli.check import run_check
from agentkeep.cli.context import CliState, pass_state
from agentkeep.cli.demo_daemon import demo_daemon
from agentkeep.cli.demo_verify import verify
from agentkeep.cli.narrator import Narrator
from agentkeep.cli.output import EXIT_BAD_INPUT, EXIT_FAILURE, CliError, Console, command_line
from agentkeep.cli.reading import open_reader
from agentkeep.cli.runtime import Home, StreamPrinter, open_system
from agentkeep.cli.tools import ToolEnvironment
from agentkeep.cli.transport import refuse_under_daemon
from agentkeep.config import AgentConfig
from agentkeep.messages import user
from agentkeep.providers.demo import DEMO_MODEL, DEMO_PROVIDER
from agentkeep.tools import ToolContext
from agentkeep.types import MessageOptions

CRASH_MARKER = "@@agentkeep-demo: crash point reached@@"
FIRST_MESSAGE = 'What is 12 * (3 + 4)? And count the words in "durable agents keep their promises".'
CRASH_MESSAGE = (
    'Save a note "water the plants at 6", then work out 1234 * 5678 '
    'and count the words in "a crash is only a pause".'
)
QUEUED_MESSAGE = "And what is 2 ** 10?"
NOTE_TEXT = "water the plants at 6"
CHILD_TIMEOUT_SECONDS = 60.0
_OPTIONS = MessageOptions(provider=DEMO_PROVIDER, model=DEMO_MODEL)


def demo_home(base: Path) -> Path:
    """A fresh ``demo-<timestamp>`` directory under ``base`` (never an existing one)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate = base / f"demo-{stamp}"
    suffix = 1
    while candidate.exists():
        suffix += 1
        candidate = base / f"demo-{stamp}-{suffix}"
    return candidate


def demo_database(database: str | None, home: Path) -> str | None:
    """The demo's store: None (``agents.db`` in its own state directory), or, on PostgreSQL,
    a schema of its own named after that directory (``demo_20261205_045542``), so a demo
    never writes into a store the URL already names."""
    if database is None:
        return None
    schema = re.sub(r"[^a-z0-9_]", "_", home.name.lower())[:60]
    parts = urlsplit(database)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "schema"]
    query.append(("schema", schema))
    return urlunsplit(parts._replace(query=urlencode(query)))


def display_url(url: str) -> str:
    """``url`` without its password (the demo prints where its store is)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def _talk_in_process(home: Home, agent_id: str, console: Console, *, resume: bool) -> None:
    printer = StreamPrinter(agent_id, console, prefix="   ")
    with open_system(home, resume=resume, features=[printer], observer=printer) as (system, _):
        if not resume:
            system.internals.accept(agent_id, "send", user(FIRST_MESSAGE), options=_OPTIONS)
        if not system.wait_for_idle(agent_id, timeout_seconds=CHILD_TIMEOUT_SECONDS):
            raise CliError("The agent did not settle in time.", code="demo_timeout")


def _run_child(home: Home, agent_id: str, state: CliState, narrator: Narrator) -> int:
    """Run the crash conversation in a child process and SIGKILL it at the crash point."""
    command = [
        sys.executable,
        "-m",
        "agentkeep.cli",
        "--home",
        str(home.path),
        *(("--database", home.database) if home.database is not None else ()),
        "--log-level",
        state.log_level,
        "demo-child",
        agent_id,
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    narrator.say(f"child process: pid {child.pid}")
    # A watchdog, not an ordering device: a child that never reaches the crash point is
    # killed so the demo fails instead of hanging.
    watchdog = threading.Timer(CHILD_TIMEOUT_SECONDS, child.kill)
    watchdog.start()
    reached = False
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if line.strip() == CRASH_MARKER:
                reached = True
                os.kill(child.pid, signal.SIGKILL)
                break
            narrator.console.line(f"   │ {line.rstrip()}")
        child.wait()
    finally:
        watchdog.cancel()
        if child.stdout is not None:
            child.stdout.close()
    if not reached:
        raise CliError(
            f"The child process ended (exit {child.returncode}) before the crash point.",
            code="demo_failed",
            hint="Run it again with -v to see why.",
        )
    narrator.say(
        f"✗ SIGKILL → pid {child.pid} (exit {child.returncode}), in the middle of the tool batch"
    )
    return child.pid


def _show_crash_state(home: Home, agent_id: str, narrator: Narrator) -> None:
    with open_reader(home) as store:
        shown = store.read(lambda tx: read_agent(tx, agent_id))
    assert shown is not None
    owed = shown["owed"] or {}
    narrator.say(f"state: {shown['state']} (stage: {owed.get('stage', '-')})")
    for call in shown["pending_calls"]:
        narrator.say(f"  pending #{call['index']} {call['name']}({call['arguments']})")
    for entry in shown["queued"]:
        narrator.say(f"  queued: {entry['text']}")
    if home.database is None:  # SQLite's file checks; PostgreSQL checks its own pages
        report = run_check(home)
        verdict = "OK" if report["ok"] else f"FAILED: {report['problems']}"
        narrator.say(f"db check on the crashed store: {verdict}")


@click.command()
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path, file_okay=False),
    help="Run in this (new or empty) directory instead of <home>/demo-<timestamp> (with "
    "--daemon: instead of a new temporary directory).",
)
@click.option(
    "--daemon",
    is_flag=True,
    help="Instead: show the daemon's event stream resuming across a SIGKILL of `agentkeep "
    "serve` (`make demo-daemon`).",
)
@pass_state
def demo(state: CliState, directory: Path | None, daemon: bool) -> None:
    """Show a durable agent surviving a SIGKILL in the middle of a tool batch (with --daemon:
    the daemon's event stream surviving a SIGKILL of `agentkeep serve`)."""
    if daemon:
        demo_daemon(state, directory)
        return
    refuse_under_daemon(state, "demo")
    if directory is not None and directory.exists() and any(directory.iterdir()):
        raise CliError(
            f"{directory} is not empty.",
            code="demo_dir_not_empty",
            hint="Pass a new directory to --dir, or leave it out.",
            exit_code=EXIT_BAD_INPUT,
        )
    started = time.monotonic()
    path = directory or demo_home(state.home.path)
    home = Home(path=path, database=demo_database(state.home.database, path))
    home.path.mkdir(parents=True, exist_ok=True)
    console = Console(sys.stderr if state.json_mode else None)
    narrator = Narrator(console)
    console.line("agentkeep demo: a durable agent survives a crash")
    console.line(f"state directory: {home.path}")
    if home.database is not None:
        console.line(f"store: PostgreSQL, {display_url(home.database)}")

    narrator.step(1, "Create an agent on the local demo model, with three tools:")
    narrator.say("calculator  durable: pure, safe to run again after a restart")
    narrator.say("word_count  durable: pure")
    narrator.say("save_note   NOT durable: appends to notes.txt, must never run twice")
    config = AgentConfig(metadata={"title": "agentkeep demo"})
    with open_system(home, resume=False, create=True) as (system, _):
        agent_id = system.create(config).id
    narrator.say(f"agent {agent_id}")

    narrator.step(2, "Talk to it (the answer streams in; tool calls show as they run):")
    narrator.say(f"you: {FIRST_MESSAGE}")
    _talk_in_process(home, agent_id, console, resume=False)

    narrator.step(3, "Continue in a child process, and SIGKILL it in the middle of a tool batch:")
    narrator.say(f"you: {CRASH_MESSAGE}")
    narrator.say(f"you (queued behind it): {QUEUED_MESSAGE}")
    child_pid = _run_child(home, agent_id, state, narrator)

    narrator.step(4, "What the crash left on disk:")
    _show_crash_state(home, agent_id, narrator)

    narrator.step(5, f"Restart on the same state directory (pid {os.getpid()}):")
    _talk_in_process(home, agent_id, console, resume=True)

    narrator.step(6, "Check the outcome against the durable state and the tool ledger:")
    outcome = verify(home, agent_id, child_pid=child_pid, note_text=NOTE_TEXT)
    for line in outcome["lines"]:
        narrator.say(line)
    passed = bool(outcome["ok"])

    console.line("")
    elapsed = time.monotonic() - started
    if passed:
        console.line(
            "demo: OK — every message answered once; save_note was not repeated after the SIGKILL"
            f" ({elapsed:.1f}s)"
        )
    else:
        console.line("demo: FAILED — see the ✗ lines above")
    console.line("")
    console.line("Inspect it yourself (each command runs as printed, from this directory):")
    commands = [("session", "list"), ("session", "show", agent_id)]
    commands.append(("session", "transcript", agent_id))
    if home.database is None:
        commands.append(("db", "check"))
    database = () if home.database is None else ("--database", home.database)
    for command in commands:
        console.line(f"  {command_line(home.path, *database, *command)}")
    files = (shlex.quote(str(home.path / name)) for name in ("notes.txt", "tool-runs.jsonl"))
    console.line(f"  cat {' '.join(files)}")
    if state.json_mode:
        summary: dict[str, Any] = {
            "ok": passed,
            "home": str(home.path),
            "agent_id": agent_id,
            "child_pid": child_pid,
            "checks": outcome["checks"],
        }
        state.output.result(summary)
    if not passed:
        raise SystemExit(EXIT_FAILURE)


class _CrashPoint:
    """In the child: once the durable tools of the batch have run and ``save_note`` has
    written its note, tell the parent (a marker line on stdout) and wait to be killed."""

    def __init__(self, console: Console, printer: StreamPrinter) -> None:
        self._console = console
        self._printer = printer
        self._finished: set[str] = set()
        self._condition = threading.Condition()

    def tool_started(self, agent_id: str, name: str, arguments: str) -> None:
        self._printer.tool_started(agent_id, name, arguments)

    def tool_finished(self, agent_id: str, name: str, result: str) -> None:
        self._printer.tool_finished(agent_id, name, result)
        with self._condition:
            self._finished.add(name)
            self._condition.notify_all()

    def after_note(self, ctx: ToolContext) -> None:
        with self._condition:
            self._condition.wait_for(
                lambda: {"calculator", "word_count"} <= self._finished, timeout=10
            )
        self._console.line(
            "    ✎ save_note wrote its note; no result of this batch is committed yet"
        )
        self._console.line(CRASH_MARKER)
        # The parent kills this process now; if it never does, do not linger.
        ctx.cancel.wait_cancelled(CHILD_TIMEOUT_SECONDS)
        os._exit(EXIT_FAILURE)


@click.command(name="demo-child", hidden=True)
@click.argument("agent_id")
@pass_state
def demo_child(state: CliState, agent_id: str) -> None:
    """(internal) The demo's child process: starts the conversation the parent kills."""
    console = Console()
    printer = StreamPrinter(agent_id, console)
    crash = _CrashPoint(console, printer)
    tools = ToolEnvironment(home=state.home.path, observer=crash, after_note=crash.after_note)
    with open_system(state.home, resume=False, features=[printer], tools=tools) as (system, _):
        system.internals.accept(agent_id, "send", user(CRASH_MESSAGE), options=_OPTIONS)
        system.internals.accept(agent_id, "send", user(QUEUED_MESSAGE), options=_OPTIONS)
        system.wait_for_idle(agent_id, timeout_seconds=CHILD_TIMEOUT_SECONDS)
