"""One command tree: `agent …` for definitions, `session …` for conversations,
`talk`, `serve`, `mcp`, and agentkeep's `db`, `chaos`, `demo`, `resume`, `purge`. The
conversation commands that were top-level (`agentkeep send` …) live under `session`, and
their old names exit 2 naming the command now."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from agentkeep.cli import MOVED, cli

# (`demo-child`, the demo's child process, is hidden.)
TOP_LEVEL = {
    "session",
    "agent",
    "talk",
    "serve",
    "mcp",
    "db",
    "chaos",
    "demo",
    "resume",
    "purge",
    "workers",
}
REMOVED = {
    "create": "session start",
    "list": "session list",
    "show": "session show",
    "send": "session send",
    "steer": "session send --steer",
    "abort": "session cancel",
    "compact": "session compact",
    "transcript": "session transcript",
    "delete": "session delete",
    "demo-daemon": "demo --daemon",
}
SESSION_COMMANDS = {
    # the wire's
    "list",
    "start",
    "show",
    "events",
    "send",
    "cancel",
    "archive",
    # agentkeep's
    "export",
    "settle",
    "compact",
    "transcript",
    "delete",
}


def _listed(help_text: str) -> set[str]:
    """The command names of a click group's --help (the lines under "Commands:")."""
    commands = help_text.split("Commands:\n", 1)[1]
    return {m.group(1) for m in re.finditer(r"^  (\S+)", commands, re.MULTILINE)}


def test_the_top_level_is_seed_002s_tree_and_agentkeeps_own_commands() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    assert _listed(result.stdout) == TOP_LEVEL
    assert "`agentkeep session …` the durable conversations" in " ".join(result.stdout.split())


def test_session_help_lists_the_folded_commands() -> None:
    result = CliRunner().invoke(cli, ["session", "--help"])
    assert result.exit_code == 0
    assert _listed(result.stdout) == SESSION_COMMANDS


@pytest.mark.parametrize(("old", "new"), sorted(REMOVED.items()))
def test_a_removed_name_exits_2_naming_its_command(home: Path, old: str, new: str) -> None:
    for args in ([old], [old, "a1", "hi"], ["--json", old, "--help"]):
        result = CliRunner().invoke(cli, ["--home", str(home), *args])
        assert result.exit_code == 2, (args, result.output)
        assert f"`agentkeep {old}` is now `agentkeep {new}`" in result.stderr, args
        assert result.stdout == ""
    # and the named command exists: its first words are a command path
    words = new.split()
    command = cli
    for word in [w for w in words if not w.startswith("--")]:
        command = command.commands[word]  # type: ignore[attr-defined]
    assert MOVED[old] == new


def test_a_removed_name_is_refused_before_anything_is_written(home: Path) -> None:
    result = CliRunner().invoke(cli, ["--home", str(home), "create", "--id", "a1"])
    assert result.exit_code == 2
    assert "without AGENT_ID: a session with no definition" in result.stderr
    assert not home.exists() or not any(home.iterdir())


def test_start_without_a_definition_and_with_one_are_one_command(
    invoke: Any, tmp_path: Path
) -> None:
    bare = invoke("session", "start", "--id", "bare", "--title", "Bare", json_mode=True)
    assert bare.exit_code == 0, bare.stderr
    definition = tmp_path / "calc.json"
    definition.write_text(json.dumps({"id": "calc", "name": "Calc"}))
    assert invoke("agent", "create", str(definition)).exit_code == 0
    pinned = invoke("session", "start", "calc", "--id", "pinned", "--title", "P", json_mode=True)
    assert pinned.exit_code == 0, pinned.stderr
    listed = json.loads(invoke("session", "list", json_mode=True).stdout)["sessions"]
    assert [(s["id"], s["agentId"], s["metadata"]) for s in listed] == [
        ("bare", None, {"title": "Bare"}),
        ("pinned", "calc", {"title": "P"}),
    ]
    # A definition's session takes its configuration from the definition.
    for flag in (["--parent", "bare"], ["--config", str(definition)], ["--with-environment"]):
        refused = invoke("session", "start", "calc", *flag)
        assert refused.exit_code == 2, flag
        assert "leave out AGENT_ID" in refused.stderr
    refused = invoke("session", "start", "--revision", "r1")
    assert refused.exit_code == 2
    assert "--revision goes with AGENT_ID" in refused.stderr
