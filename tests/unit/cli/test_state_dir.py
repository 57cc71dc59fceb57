"""``--state-dir`` is the wire's spelling of ``--home``: before the command,
and on ``mcp``."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from tests.postgres_server import on_sqlite

from agentkeep.cli import cli

DEFINITION = '{"id": "quick", "name": "Quick"}'


def test_state_dir_names_the_home(tmp_path: Path) -> None:
    runner = CliRunner()
    home = tmp_path / "state"
    created = runner.invoke(
        cli, ["--state-dir", str(home), "--json", "agent", "create", "-"], input=DEFINITION
    )
    assert created.exit_code == 0, created.stderr
    if on_sqlite():  # the store is in the directory (on PostgreSQL, the server's schema)
        assert (home / "agents.db").is_file()
    listed = runner.invoke(cli, ["--home", str(home), "--json", "agent", "list"])
    assert [a["id"] for a in json.loads(listed.stdout)["agents"]] == ["quick"]


def test_state_dir_is_in_help() -> None:
    runner = CliRunner()
    assert "--state-dir" in runner.invoke(cli, ["--help"]).stdout
    assert "--state-dir" in runner.invoke(cli, ["mcp", "--help"]).stdout
