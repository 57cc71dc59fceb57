"""What a newcomer copies and pastes works: --json anywhere, JSON metadata, hints that run."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from tests.postgres_server import on_sqlite

from agentkeep.cli import cli


def test_json_after_the_subcommand_is_the_same_as_before_it(invoke: Any) -> None:
    invoke("session", "start", "--id", "alpha", "--title", "first")
    for args in (
        (
            "session",
            "list",
        ),
        ("session", "show", "alpha"),
        ("session", "transcript", "alpha"),
        *([("db", "check")] if on_sqlite() else []),  # db check is SQLite's
    ):
        before = invoke(*args, json_mode=True)
        after = invoke(*args, "--json")
        assert after.exit_code == 0, (args, after.stderr)
        assert json.loads(after.stdout) == json.loads(before.stdout), args
    created = invoke("session", "start", "--id", "beta", "--json")
    assert json.loads(created.stdout)["id"] == "beta"


def test_json_after_the_subcommand_also_shapes_errors(invoke: Any) -> None:
    invoke("session", "start", "--id", "alpha")
    result = invoke("session", "show", "nobody", "--json")
    assert result.exit_code == 4
    assert json.loads(result.stderr)["error"]["code"] == "unknown_session"


def test_show_prints_metadata_as_json(invoke: Any) -> None:
    invoke("session", "start", "--id", "alpha", "--title", "café", "--metadata", "team=research")
    shown = invoke("session", "show", "alpha")
    (line,) = [line for line in shown.stdout.splitlines() if line.startswith("metadata")]
    assert json.loads(line.removeprefix("metadata").strip()) == {
        "team": "research",
        "title": "café",
    }


@pytest.mark.sqlite_only("the hint finds a demo's store by its agents.db file under the home")
def test_list_next_to_the_demo_names_the_demos_store_with_a_command_that_runs(
    tmp_path: Path,
) -> None:
    runner = CliRunner()
    home = tmp_path / ".agentkeep"
    demo_home = home / "demo-20260101-000000"
    created = runner.invoke(cli, ["--home", str(demo_home), "session", "start", "--id", "alpha"])
    assert created.exit_code == 0, created.stderr

    result = runner.invoke(cli, ["--home", str(home), "session", "list"])

    assert result.exit_code == 4
    error, hint = result.stderr.splitlines()
    assert error == f"error: There is no agentkeep store in {home}."
    assert str(demo_home) in hint
    command = shlex.split(hint.split("`")[1])
    assert command[0] == "agentkeep"
    listed = runner.invoke(cli, command[1:])
    assert listed.exit_code == 0, listed.stderr
    assert "alpha" in listed.stdout
