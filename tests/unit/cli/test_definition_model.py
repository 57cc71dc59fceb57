"""``agentkeep agent create/update`` refuse a ``model.id`` the system does not serve when the
definition is written, naming the field and what is registered."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from agentkeep.cli import cli


def test_an_unregistered_provider_is_refused_at_create_and_update(home: Path) -> None:
    runner = CliRunner()

    def agent(*args: str, stdin: str | None = None) -> Result:
        return runner.invoke(cli, ["--home", str(home), "--json", "agent", *args], input=stdin)

    refused = agent("create", "-", stdin='{"id": "far", "model": {"id": "nope/m-1"}}')
    assert refused.exit_code != 0
    error = json.loads(refused.stderr)["error"]
    assert error["code"] == "invalid_definition"
    assert error["message"] == (
        'model.id: provider "nope" is not registered in this system (registered: local, demo)'
    )
    listed = agent("list", "--include-deleted")
    assert json.loads(listed.stdout)["agents"] == []  # nothing was written

    created = agent("create", "-", stdin='{"id": "near", "model": {"id": "demo/demo-1"}}')
    assert created.exit_code == 0, created.stderr
    patched = agent("update", "near", "-", stdin='{"model": {"id": "demo/gpt-9"}}')
    assert patched.exit_code != 0
    message = json.loads(patched.stderr)["error"]["message"]
    assert message.startswith('model.id: provider "demo" does not serve model "gpt-9"')
