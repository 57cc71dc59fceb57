"""The fast loop: ``make test-fast`` runs the unit suite without the tests
``tests/unit/conftest.py`` names slow, and ``make test`` (what CI runs) prints the 25 slowest
tests, so the suite's time stays visible."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.unit.conftest import SLOW

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "tests" / "unit"


def target(name: str) -> str:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    found = re.search(rf"^{re.escape(name)}:.*\n((?:\t.*\n)+)", makefile, flags=re.M)
    assert found is not None, f"the Makefile has no {name} target"
    return found.group(1)


def test_every_slow_entry_names_a_file_or_a_test_that_exists() -> None:
    assert len(SLOW) == len(set(SLOW))
    for entry in SLOW:
        file, _, name = entry.partition("::")
        path = UNIT / file
        assert path.is_file(), f"{entry}: tests/unit/{file} is gone"
        if name:
            source = path.read_text(encoding="utf-8")
            assert re.search(rf"^def {name}\(", source, flags=re.M), f"{entry}: no such test"


def test_test_fast_leaves_the_slow_tests_out_and_ci_prints_durations() -> None:
    assert re.search(r'pytest tests/unit -m "not slow"', target("test-fast"))
    assert "-n 2" in target("test-fast")  # both cores
    # CI's `make test`: the whole suite on SQLite (serial), then the whole suite on
    # PostgreSQL over two workers.
    sqlite_pass, postgres_pass = (
        line for line in target("test").splitlines() if "-m pytest" in line
    )
    assert sqlite_pass.lstrip().startswith("AGENTKEEP_TEST_DATABASE=sqlite ")
    assert postgres_pass.lstrip().startswith("AGENTKEEP_TEST_DATABASE=postgres ")
    assert "-n " not in sqlite_pass
    assert "$(PASS_WORKERS)" in postgres_pass
    assert " -m " not in sqlite_pass.split("-m pytest", 1)[1]  # the whole suite
    assert " -m " not in postgres_pass.split("-m pytest", 1)[1]  # the whole suite too
    assert re.search(
        r"^PASS_WORKERS \?= -n 2$", (REPO / "Makefile").read_text(encoding="utf-8"), flags=re.M
    )
    assert "--durations=25" in sqlite_pass
    assert "--durations=25" in postgres_pass
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^make test$", ci, flags=re.M)


def test_the_marker_reaches_a_listed_file_and_a_listed_test_only() -> None:
    chaos_cli = "tests/unit/cli/test_chaos_cli.py"
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*command, "-m", "not slow", chaos_cli, "tests/unit/persistence/test_lock.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    collected = [line for line in done.stdout.splitlines() if "::" in line]
    assert collected, done.stdout
    assert all(line.startswith(chaos_cli) for line in collected)  # test_lock.py: all slow
    slow = "test_a_real_process_and_a_power_loss_seed_run_from_the_cli"
    assert not any(slow in line for line in collected)
    assert re.search(r"(\d+)/(\d+) tests collected \((\d+) deselected\)", done.stdout)
