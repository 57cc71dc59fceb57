"""Fixtures for the CLI tests: a runner, a fresh state directory, the console script."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from agentkeep.cli import cli

AGENTKEEP = Path(sys.executable).parent / "agentkeep"

Invoke = Callable[..., Result]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def invoke(home: Path) -> Invoke:
    """Run ``agentkeep --home <home> ARGS...`` in-process with click's runner."""
    runner = CliRunner()

    def run(*args: str, json_mode: bool = False) -> Result:
        prefix = ["--home", str(home)] + (["--json"] if json_mode else [])
        return runner.invoke(cli, [*prefix, *args], catch_exceptions=False)

    return run
