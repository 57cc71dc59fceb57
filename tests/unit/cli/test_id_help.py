"""The CLI's ``--id`` options state the id rule: a bad one is exit 2 with
one line saying which id, and an id of the wire's rule (``review-2024``) is accepted."""

from __future__ import annotations

from click.testing import CliRunner
from tests.unit.cli.conftest import Invoke

from agentkeep.cli import cli

RULE = "1-128 lowercase letters, digits, dots, underscores or hyphens"


def test_the_help_of_every_id_option_states_the_rule() -> None:
    runner = CliRunner()
    for command in (["session", "start", "--help"], ["session", "send", "--help"]):
        shown = runner.invoke(cli, command)
        assert shown.exit_code == 0, shown.output
        assert RULE in " ".join(shown.output.split()), command


def test_a_seed_002_id_is_taken_and_a_bad_one_is_exit_2(invoke: Invoke) -> None:
    created = invoke("session", "start", "--id", "review-2024")
    assert created.exit_code == 0, created.output
    refused = invoke("session", "start", "--id", "Review-2024")
    assert refused.exit_code == 2, refused.output
    assert "agent id 'Review-2024' is invalid" in refused.output
