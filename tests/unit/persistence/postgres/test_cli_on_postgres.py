"""The command line on a PostgreSQL store: ``--database URL`` (or ``AGENTKEEP_DATABASE``)
for every command — a session started, a turn talked through with the demo model, the
reads (``session list``/``show``) — and nothing of the store in the state directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from agentkeep.cli import cli

AGENTKEEP = Path(sys.executable).parent / "agentkeep"


def test_every_command_runs_on_the_store_the_url_names(tmp_path: Path, pg_url: str) -> None:
    home = tmp_path / "state"
    runner = CliRunner()

    def run(*args: str) -> str:
        prefix = ["--home", str(home), "--database", pg_url, "--json"]
        result = runner.invoke(cli, [*prefix, *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.stdout

    run("session", "start", "--id", "zeta")
    lines = run("talk", "zeta", "What is 6 * 7?", "--provider", "demo", "--model", "demo-1")
    assert json.loads(lines.splitlines()[-1])["answer"] == "6 * 7 = 42."
    listed = json.loads(run("session", "list"))
    assert [s["id"] for s in listed["sessions"]] == ["zeta"]
    shown = json.loads(run("session", "show", "zeta"))
    assert shown["turns"][-1]["status"] == "completed"
    assert not (home / "agents.db").exists()
    # The environment variable names the same store, for a command in another process.
    env = {**os.environ, "AGENTKEEP_DATABASE": pg_url}
    done = subprocess.run(
        [str(AGENTKEEP), "--home", str(home), "--json", "session", "list"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert [s["id"] for s in json.loads(done.stdout)["sessions"]] == ["zeta"]


def test_a_read_of_a_schema_without_a_store_is_no_store_as_on_sqlite(
    tmp_path: Path, pg_url: str
) -> None:
    """Nothing opened there yet: not found (exit 4, ``no_store``) with what to do, as a state
    directory without ``agents.db`` answers; not a generic store error (exit 1)."""
    result = CliRunner().invoke(
        cli,
        ["--home", str(tmp_path / "state"), "--database", pg_url, "--json", "session", "list"],
        catch_exceptions=False,
    )
    assert result.exit_code == 4, result.output
    error = json.loads(result.stderr)["error"]
    assert error["code"] == "no_store"
    assert "schema=" in error["message"]
    assert "agentkeep session start" in error["hint"]
