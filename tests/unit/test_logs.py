"""Embedded, the library writes nothing on stdout: its logs go to stderr, warnings and up."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

# A program embedding agentkeep: a normal conversation, then one library warning.
_EMBEDDER = """
import sys
import structlog
import agentkeep as ak
SETUP
providers = ak.Providers()
providers.add("local", ak.ScriptedModel(), kind="gym")
database = sys.argv[2] if len(sys.argv) > 2 else None
system = ak.AgentSystem.open(
    sys.argv[1], providers=providers, provider="local", model="gym-1", database=database
)
agent = system.create(id="a1")
system.internals.accept("a1", "send", ak.user("hello"))
assert system.wait_for_idle("a1", timeout_seconds=60)
answer = system.transcript("a1")[-1]
structlog.get_logger("agentkeep.probe").warning("probe_warning", detail=1)
system.close()
print("the program's own output")
"""

SETUPS = {
    "nothing_configured": "",
    "stdlib_logging_configured": (
        "import logging; logging.basicConfig(level=logging.INFO, stream=sys.stderr, "
        "format='stdlib %(name)s %(message)s')"
    ),
    "structlog_configured": (
        "structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr), "
        "processors=[structlog.processors.KeyValueRenderer()])"
    ),
}


def embed(setup: str, home: Path, database: str | None = None) -> subprocess.CompletedProcess[str]:
    database_args = [] if database is None else [database]
    return subprocess.run(
        [sys.executable, "-c", _EMBEDDER.replace("SETUP", setup), str(home), *database_args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("setup", list(SETUPS))
def test_an_embedding_program_gets_nothing_from_the_library_on_stdout(
    tmp_path: Path, setup: str, database_url: str | None
) -> None:
    result = embed(SETUPS[setup], tmp_path / "state", database_url)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "the program's own output\n"
    assert "probe_warning" in result.stderr  # warnings still reach the embedder, on stderr


def test_by_default_only_warnings_and_above_are_logged(tmp_path: Path) -> None:
    result = embed(SETUPS["nothing_configured"], tmp_path / "state")
    (line,) = result.stderr.splitlines()
    assert "probe_warning" in line
    assert "[warning" in line
    assert "store_opened" not in result.stderr  # info: below the default level


def test_an_embedders_logging_configuration_is_honoured(tmp_path: Path) -> None:
    stdlib = embed(SETUPS["stdlib_logging_configured"], tmp_path / "a")
    # Its INFO level (the logger is the store's module: PostgreSQL's on that pass).
    assert re.search(
        r"^stdlib agentkeep\.persistence\.(postgres\.)?store store_opened", stdlib.stderr, re.M
    )
    assert "stdlib agentkeep.probe probe_warning" in stdlib.stderr
    configured = embed(SETUPS["structlog_configured"], tmp_path / "b")
    assert "event='store_opened'" in configured.stderr  # its renderer, its (absent) filter


def test_a_logged_exception_is_rendered_on_stderr_without_a_warning() -> None:
    program = (
        "import structlog\n"
        "from agentkeep.logs import install_default_logging\n"
        "install_default_logging()\n"
        "try:\n"
        "    1 / 0\n"
        "except ZeroDivisionError:\n"
        "    structlog.get_logger('agentkeep.probe').exception('probe_failed')\n"
    )
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", program],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert "probe_failed" in result.stderr
    assert "ZeroDivisionError: division by zero" in result.stderr
