"""Off the happy path, as a real process: one error line, a hint naming the real cause, the
documented exit code, and never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..persistence.damage import flip_bytes, truncate

NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


@dataclass
class Case:
    args: list[str | bytes]
    exit_code: int
    error_words: list[str]
    hint_words: list[str]
    env: dict[str, str] = field(default_factory=dict)
    as_nobody: bool = False


def agentkeep(
    *args: str | bytes, cwd: Path, env: dict[str, str] | None = None, as_nobody: bool = False
) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "AGENTKEEP_HOME"}
    environment.update(env or {})
    prefix = NOBODY if as_nobody else []
    return subprocess.run(
        [*prefix, sys.executable, "-m", "agentkeep.cli", *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def world_readable() -> Iterator[Path]:
    """A directory another user can reach (pytest's tmp_path is private to root)."""
    directory = Path(tempfile.mkdtemp(prefix="agentkeep-"))
    directory.chmod(0o755)
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def require_nobody(cwd: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("a read-only home is tested by dropping root privileges; not running as root")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed: cannot run as another user")
    probe = subprocess.run(
        [*NOBODY, sys.executable, "-c", "import agentkeep.cli"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.returncode != 0:
        pytest.skip(f"this Python cannot run as user nobody: {probe.stderr.strip()[-200:]}")


def setup_case(name: str, base: Path) -> Case:
    home = base / "state"
    created = agentkeep("--home", str(home), "session", "start", "--id", "a1", cwd=base)
    assert created.returncode == 0, created.stderr
    database = home / "agents.db"
    if name == "non_utf8_argument":
        return Case(
            args=["--home", str(home), "session", "send", "a1", b"caf\xe9 au lait"],
            exit_code=2,
            error_words=["Argument 6", "not valid UTF-8", "caf\\xe9"],
            hint_words=["UTF-8", "LANG"],
        )
    if name == "home_names_a_file":
        afile = base / "not-a-directory"
        afile.write_text("x")
        return Case(
            args=["session", "list"],
            env={"AGENTKEEP_HOME": str(afile)},
            exit_code=2,
            error_words=["AGENTKEEP_HOME names a file", str(afile)],
            hint_words=["Point AGENTKEEP_HOME at a directory"],
        )
    if name == "read_only_home":
        require_nobody(base)
        return Case(
            args=["--home", str(home), "session", "send", "a1", "hi"],
            as_nobody=True,
            exit_code=1,
            error_words=[str(home), "read-only for this user"],
            hint_words=["Use a directory this user can write", "permissions"],
        )
    if name == "truncated_database":
        _checkpoint(base, home)
        truncate(database)
        return Case(
            args=["--home", str(home), "session", "list"],
            exit_code=1,
            error_words=[str(database), "is damaged"],
            hint_words=["db check", "restore", "backup"],
        )
    assert name == "byte_flipped_database"
    _checkpoint(base, home)
    flip_bytes(database, table="agents")
    return Case(
        args=["--home", str(home), "session", "send", "a1", "hi"],
        exit_code=1,
        error_words=[str(database), "is damaged"],
        hint_words=["db check", "restore", "backup"],
    )


def _checkpoint(base: Path, home: Path) -> None:
    # `db check` on a healthy store leaves everything in agents.db (no WAL to replay).
    assert agentkeep("--home", str(home), "resume", cwd=base).returncode == 0
    for suffix in ("-wal", "-shm"):
        Path(f"{home / 'agents.db'}{suffix}").unlink(missing_ok=True)


@pytest.mark.parametrize(
    "name",
    [
        "non_utf8_argument",
        "home_names_a_file",
        "read_only_home",
        pytest.param(
            "truncated_database",
            marks=pytest.mark.sqlite_only("damage written into the SQLite database file"),
        ),
        pytest.param(
            "byte_flipped_database",
            marks=pytest.mark.sqlite_only("damage written into the SQLite database file"),
        ),
    ],
)
def test_each_off_path_case_is_one_line_a_fitting_hint_and_its_exit_code(
    name: str, world_readable: Path
) -> None:
    case = setup_case(name, world_readable)
    result = agentkeep(*case.args, cwd=world_readable, env=case.env, as_nobody=case.as_nobody)

    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert result.returncode == case.exit_code, result.stderr
    error, hint = result.stderr.splitlines()
    assert error.startswith("error: ")
    for words in case.error_words:
        assert words in error
    assert hint.startswith("hint: ")
    for words in case.hint_words:
        assert words in hint
    assert "providers.toml" not in hint  # hints name the real cause


def test_hints_name_the_real_cause_not_providers_toml(invoke: Any) -> None:
    bad_id = invoke("session", "start", "--id", "Not Valid", json_mode=True)
    assert bad_id.exit_code == 2
    error = json.loads(bad_id.stderr)["error"]
    assert error["code"] == "invalid_id"
    assert "providers.toml" not in error["hint"]
    assert "--help" in error["hint"]

    invoke("session", "start", "--id", "alpha")
    unknown = invoke("session", "send", "alpha", "hi", "--provider", "nope", json_mode=True)
    error = json.loads(unknown.stderr)["error"]
    assert error["code"] == "unknown_provider"
    assert "providers.toml" in error["hint"]  # here it is the real cause
