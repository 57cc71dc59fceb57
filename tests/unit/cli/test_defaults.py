"""What a newcomer gets without configuring anything: the demo model, which really answers,
documented in ``--help`` with the exit codes of a turn."""

from __future__ import annotations

import json
from typing import Any

from click.testing import CliRunner

from agentkeep.cli import cli


def test_a_new_agent_really_answers_arithmetic_and_word_counts(invoke: Any) -> None:
    assert invoke("session", "start", "--id", "a1").exit_code == 0
    answered = invoke("session", "send", "a1", "What is 12 * (3 + 4)?", "--wait")
    assert answered.exit_code == 0, answered.stderr
    assert answered.stdout.strip() == "12 * (3 + 4) = 84."
    counted = invoke("session", "send", "a1", 'count the words in "the quick brown fox"', "--wait")
    assert counted.stdout.strip() == '"the quick brown fox" has 4 words.'
    shown = json.loads(invoke("session", "show", "a1", json_mode=True).stdout)["runtime"]
    assert (shown["settings"]["provider"], shown["settings"]["model"]) == ("demo", "demo-1")


def test_help_documents_the_default_model_and_the_turn_exit_codes() -> None:
    text = CliRunner().invoke(cli, ["--help"]).stdout
    assert 'the default is the local demo model (provider "demo", model "demo-1")' in text
    assert "5  the agent's turn failed" in text
    assert "130  interrupted by Ctrl-C" in text
    send = CliRunner().invoke(cli, ["session", "send", "--help"]).stdout
    assert "- (read from stdin) or --file PATH" in send
    assert "a failed turn exits 5" in send
