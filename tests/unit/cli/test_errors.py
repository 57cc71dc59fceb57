"""Bad input: a message on stderr saying what to do, a stable code, a non-zero exit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result


def error_of(result: Result) -> dict[str, Any]:
    assert result.stdout == ""  # errors never go to stdout
    value: dict[str, Any] = json.loads(result.stderr)["error"]
    return value


def test_a_missing_store_is_reported_with_what_to_do(invoke: Any) -> None:
    result = invoke("session", "list", json_mode=True)
    assert result.exit_code == 4
    error = error_of(result)
    assert error["code"] == "no_store"
    assert "agentkeep session start" in error["hint"]


def test_an_unknown_session_is_exit_4_and_points_at_list(invoke: Any) -> None:
    invoke("session", "start", "--id", "alpha")
    for args in (
        ("session", "show", "nobody"),
        ("session", "transcript", "nobody"),
        ("session", "send", "nobody", "hi"),
        ("session", "send", "nobody", "hi", "--wait"),
        ("talk", "nobody", "hi"),
        ("session", "cancel", "nobody"),
        ("session", "compact", "nobody"),
        ("session", "delete", "nobody"),
    ):
        result = invoke(*args, json_mode=True)
        assert result.exit_code == 4, args
        error = error_of(result)
        # talk's AGENT names a definition or a session: "no such agent" covers both
        code = "unknown_agent" if args[0] == "talk" else "unknown_session"
        assert error["code"] == code, args
        assert "nobody" in error["message"]
        assert "list" in error["hint"]


def test_the_readable_error_names_the_problem_and_the_fix(invoke: Any) -> None:
    invoke("session", "start", "--id", "alpha")
    result = invoke("session", "show", "nobody")
    assert result.exit_code == 4
    message, hint = result.stderr.splitlines()
    assert message == 'error: Session "nobody" does not exist.'
    assert hint.startswith("hint: List the sessions with `agentkeep --home ")
    assert hint.endswith(" session list`.")


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_an_empty_message_is_refused_before_anything_is_queued(invoke: Any, text: str) -> None:
    invoke("session", "start", "--id", "alpha")
    for command in (("session", "send"), ("session", "send", "--steer"), ("talk",)):
        result = invoke(*command, "alpha", text, json_mode=True)
        assert result.exit_code == 2
        assert error_of(result)["code"] == "empty_message"
    shown = json.loads(invoke("session", "show", "alpha", json_mode=True).stdout)
    assert shown["runtime"]["queued"] == []


@pytest.mark.parametrize(
    ("content", "code"),
    [
        ("{not json", "invalid_config_file"),
        ("[1, 2]", "invalid_config_file"),
        ('{"metadata": {}, "colour": "blue"}', "invalid_config_file"),
        ('{"environment": {"os_version": "x"}}', "invalid_config"),
        ('{"metadata": "not an object"}', "invalid_config"),
    ],
)
def test_a_malformed_config_file_is_refused(
    invoke: Any, home: Path, tmp_path: Path, content: str, code: str
) -> None:
    config = tmp_path / "agent.json"
    config.write_text(content)
    result = invoke("session", "start", "--config", str(config), json_mode=True)
    assert result.exit_code == 2
    error = error_of(result)
    assert error["code"] == code
    assert str(config) in error["message"]
    assert not (home / "agents.db").exists()  # nothing was created


def test_a_missing_config_file_is_refused(invoke: Any, tmp_path: Path) -> None:
    result = invoke("session", "start", "--config", str(tmp_path / "absent.json"), json_mode=True)
    assert result.exit_code == 2
    assert error_of(result)["code"] == "config_file_missing"


def test_a_taken_id_is_refused(invoke: Any) -> None:
    invoke("session", "start", "--id", "alpha")
    result = invoke("session", "start", "--id", "alpha", json_mode=True)
    assert result.exit_code == 2
    assert error_of(result)["code"] == "agent_exists"


def test_an_invalid_id_is_refused(invoke: Any) -> None:
    result = invoke("session", "start", "--id", "Not Valid", json_mode=True)
    assert result.exit_code == 2
    assert error_of(result)["code"] == "invalid_id"


def test_an_unknown_provider_is_refused_with_the_known_ones(invoke: Any) -> None:
    invoke("session", "start", "--id", "alpha")
    result = invoke("session", "send", "alpha", "hi", "--provider", "nope", json_mode=True)
    assert result.exit_code == 2
    error = error_of(result)
    assert error["code"] == "unknown_provider"
    assert "local" in error["message"]
    assert "demo" in error["message"]


def test_a_malformed_providers_file_is_refused_naming_the_file(invoke: Any, home: Path) -> None:
    invoke("session", "start", "--id", "alpha")
    (home / "providers.toml").write_text("[providers.x\nkind = 1")
    result = invoke("session", "send", "alpha", "hi", "--wait", json_mode=True)
    assert result.exit_code == 2
    error = error_of(result)
    assert error["code"] == "invalid_providers_file"
    assert "providers.toml" in error["message"]


def test_bad_metadata_flags_are_refused(invoke: Any) -> None:
    result = invoke("session", "start", "--metadata", "novalue", json_mode=True)
    assert result.exit_code == 2
    assert error_of(result)["code"] == "invalid_metadata"


def test_an_unknown_chaos_suite_is_refused_with_the_known_ones(invoke: Any) -> None:
    result = invoke("chaos", "run", "--suite", "nope", json_mode=True)
    assert result.exit_code == 2
    error = error_of(result)
    assert error["code"] == "unknown_suite"
    assert "crash_recovery" in error["hint"]
