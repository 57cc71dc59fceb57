"""The message of send/steer/talk from TEXT, ``-`` (stdin) or ``--file PATH``: past argv's
limit (argv stops near 128 KB; up to max_input_bytes), refused clearly when malformed; and
``--timeout`` refuses what is not a duration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from agentkeep.cli import cli

AGENTKEEP = str(Path(sys.executable).parent / "agentkeep")
# Above 200 KB, words only (no digits, quotes or "note": the demo model answers with help).
BIG = ("lorem ipsum dolor sit amet " * 8_000).strip()
assert len(BIG.encode()) > 200_000


def user_texts(invoke: Any, agent_id: str = "a1") -> list[str]:
    result = invoke("session", "transcript", agent_id, json_mode=True)
    assert result.exit_code == 0, result.stderr
    messages = json.loads(result.stdout)["messages"]
    return [m["content"][0]["text"] for m in messages if m["role"] == "user"]


def queued_texts(invoke: Any, agent_id: str = "a1") -> list[str]:
    shown = json.loads(invoke("session", "show", agent_id, json_mode=True).stdout)
    return [q["text"] for q in shown["runtime"]["queued"]]


def test_send_dash_reads_a_big_message_from_stdin(home: Path) -> None:
    runner = CliRunner()
    prefix = ["--home", str(home)]
    assert runner.invoke(cli, [*prefix, "session", "start", "--id", "a1"]).exit_code == 0
    result = runner.invoke(cli, [*prefix, "session", "send", "a1", "-", "--wait"], input=BIG + "\n")
    assert result.exit_code == 0, result.stderr
    answered = runner.invoke(cli, [*prefix, "--json", "session", "transcript", "a1"])
    texts = [
        m["content"][0]["text"]
        for m in json.loads(answered.stdout)["messages"]
        if m["role"] == "user"
    ]
    assert texts == [BIG]  # the trailing newline of the pipe is dropped


def test_file_sends_a_big_message_from_a_file(invoke: Any, tmp_path: Path) -> None:
    invoke("session", "start", "--id", "a1")
    path = tmp_path / "question.txt"
    path.write_text(BIG, encoding="utf-8")
    result = invoke("talk", "a1", "--file", str(path))
    assert result.exit_code == 0, result.stderr
    assert user_texts(invoke) == [BIG]
    steered = invoke("session", "send", "--steer", "a1", "--file", str(path))
    assert steered.exit_code == 0, steered.stderr
    assert queued_texts(invoke) == [BIG]


def test_the_console_script_reads_stdin_past_the_argv_limit(home: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AGENTKEEP_HOME"}

    def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [AGENTKEEP, "--home", str(home), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=100,
        )

    assert run("session", "start", "--id", "a1").returncode == 0
    queued = run("--json", "session", "send", "a1", "-", stdin=BIG)
    assert queued.returncode == 0, queued.stderr
    assert json.loads(queued.stdout)["duplicate"] is False
    shown = json.loads(run("--json", "session", "show", "a1").stdout)
    assert [q["text"] for q in shown["runtime"]["queued"]] == [BIG]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("session", "send", "a1"), "No message"),
        (("session", "send", "a1", "hi", "--file", "{file}"), "not both"),
        (("session", "send", "a1", "--file", "{missing}"), "Cannot read the message file"),
        (("talk", "a1", "--file", "{latin1}"), "is not UTF-8 text"),
        (("session", "send", "--steer", "a1", "-"), "The message is empty"),
    ],
)
def test_a_bad_message_source_is_refused_before_anything_is_queued(
    invoke: Any, tmp_path: Path, args: tuple[str, ...], words: str
) -> None:
    invoke("session", "start", "--id", "a1")
    (tmp_path / "ok.txt").write_text("hello")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    paths = {
        "file": str(tmp_path / "ok.txt"),
        "missing": str(tmp_path / "nope.txt"),
        "latin1": str(tmp_path / "latin1.txt"),
    }
    result = invoke(*(a.format(**paths) for a in args), json_mode=True)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert words in json.loads(result.stderr)["error"]["message"]
    assert queued_texts(invoke) == []
    assert user_texts(invoke) == []


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "-inf"])
@pytest.mark.parametrize(
    "args",
    [
        ("session", "send", "a1", "hi", "--wait"),
        ("talk", "a1", "hi"),
        ("session", "cancel", "a1"),
        ("session", "compact", "a1"),
        ("resume",),
    ],
)
def test_timeout_refuses_negative_and_non_finite_values(
    invoke: Any, args: tuple[str, ...], value: str
) -> None:
    invoke("session", "start", "--id", "a1")
    result = invoke(*args, f"--timeout={value}")
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert "Invalid value for '--timeout'" in result.stderr
    assert "not a number of seconds" in result.stderr
    assert queued_texts(invoke) == []
