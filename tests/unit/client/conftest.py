"""The CLI in both modes: directly on a state directory, and through a real daemon
(``RunningServer`` on 127.0.0.1, an ephemeral port, the CLI's own providers) that owns it."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import structlog
from click.testing import CliRunner, Result

from agentkeep.agent_system import AgentSystem
from agentkeep.cli import cli
from agentkeep.cli.runtime import Home, open_system
from agentkeep.server import RunningServer, ServeOptions, load_token
from agentkeep.server import app as server_app
from agentkeep.server.daemon import remove_daemon_file, write_daemon_file

# A local model that pauses before each stream event: its turns run for seconds.
PROVIDERS = """
[providers.slow]
kind = "gym"
class = "demo"
latency_seconds = 0.4
"""
QUICK = {"id": "quick", "name": "Quick", "instructions": "Answer briefly."}
SLOW = {"id": "slowpoke", "name": "Slow", "model": {"id": "slow/demo-1"}}

Invoke = Callable[..., Result]


def make_home(path: Path) -> Path:
    """A state directory with the slow provider registered (no store yet)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "providers.toml").write_text(PROVIDERS, encoding="utf-8")
    return path


def invoker(home: Path) -> Invoke:
    """``agentkeep --home HOME [--json] ARGS...`` in-process (stdout and stderr apart)."""
    runner = CliRunner()

    def run(*args: str, json_mode: bool = True, stdin: str | None = None) -> Result:
        prefix = ["--home", str(home)] + (["--json"] if json_mode else [])
        return runner.invoke(cli, [*prefix, *args], input=stdin, catch_exceptions=False)

    return run


@dataclass
class Daemon:
    """A daemon owning a home, in this process."""

    system: AgentSystem
    server: RunningServer
    home: Path


@contextmanager
def daemon_on(home: Path) -> Iterator[Daemon]:
    """Serve ``home`` as ``agentkeep serve`` does (its providers, daemon.json, the token file)
    until the block ends."""
    token = load_token(home)
    # The daemon runs in this process, next to in-process CLI invocations that each point
    # structlog at their own captured stream: its access log, written by its threads at any
    # moment, would land in whichever invocation is capturing then (a direct run's stdout
    # once held a served run's late "http_request" line). It logs to the real stderr here.
    access = server_app.log
    server_app.log = structlog.wrap_logger(
        structlog.PrintLogger(sys.__stderr__),
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
    )
    try:
        with open_system(Home(path=home), resume=True, create=True) as (system, _):
            server = RunningServer(system, ServeOptions(port=0, token=token)).start()
            write_daemon_file(home, server.url)
            try:
                yield Daemon(system=system, server=server, home=home)
            finally:
                remove_daemon_file(home)
                server.stop()
    finally:
        server_app.log = access


def stdout_json(result: Result) -> object:
    assert result.stdout.strip(), result.stderr
    return json.loads(result.stdout)


class Kit:
    """The helpers above, for the tests (``--import-mode=importlib``: fixtures, not imports)."""

    make_home = staticmethod(make_home)
    invoker = staticmethod(invoker)
    daemon_on = staticmethod(daemon_on)
    stdout_json = staticmethod(stdout_json)


@pytest.fixture(scope="session")
def kit() -> Kit:
    return Kit()
