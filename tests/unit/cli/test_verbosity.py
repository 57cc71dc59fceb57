"""``-v`` raises the CLI's log verbosity (info, then debug); ``--log-level`` still works."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import structlog

from agentkeep.cli.logs import effective_level

AGENTKEEP = str(Path(sys.executable).parent / "agentkeep")


@pytest.mark.parametrize(
    ("level", "verbose", "expected"),
    [
        ("warning", 0, "warning"),
        ("warning", 1, "info"),
        ("warning", 2, "debug"),
        ("warning", 5, "debug"),
        ("ERROR", 1, "info"),
        ("debug", 1, "debug"),  # the more detailed of the two wins
        ("info", 0, "info"),
    ],
)
def test_v_raises_the_level_and_never_lowers_it(level: str, verbose: int, expected: str) -> None:
    assert effective_level(level, verbose) == expected


@pytest.mark.parametrize(
    ("flags", "level"),
    [((), logging.WARNING), (("-v",), logging.INFO), (("-vv",), logging.DEBUG)],
)
def test_the_cli_configures_the_level_v_asks_for(
    invoke: Any, flags: tuple[str, ...], level: int
) -> None:
    assert invoke(*flags, "session", "start", "--id", "alpha").exit_code == 0
    assert structlog.get_config()["wrapper_class"] is structlog.make_filtering_bound_logger(level)


def test_v_shows_info_logs_on_stderr_and_keeps_stdout_clean(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AGENTKEEP_HOME"}

    def agentkeep(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [AGENTKEEP, "--home", str(tmp_path / "state"), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    quiet = agentkeep("session", "start", "--id", "a1")
    assert (quiet.stdout, quiet.stderr) == ("a1\n", "")
    verbose = agentkeep("-v", "session", "start", "--id", "a2")
    assert verbose.stdout == "a2\n"
    events = [json.loads(line) for line in verbose.stderr.splitlines()]
    assert "store_opened" in [e["event"] for e in events]
    assert {e["level"] for e in events} <= {"info", "warning", "error"}
