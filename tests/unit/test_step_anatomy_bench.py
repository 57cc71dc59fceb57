"""``bench/step_anatomy.py`` runs (a few steps) and reports every section with real figures:
it hooks one internal method from the outside, so a rename would otherwise rot it silently."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "step_anatomy.py"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_step_anatomy_reports_every_section(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("step_anatomy", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    assert module.main(["--steps", "6", "--agents", "3", "--agent-steps", "4"]) == 0

    out = capsys.readouterr().out
    assert "store writer" in out
    assert "agent actors" in out
    commit = re.search(r"COMMIT\s+([\d.]+)", out)
    assert commit is not None
    assert float(commit.group(1)) > 0
    pages = re.findall(r"transaction (\d): +(\d+) pages", out)
    assert [n for n, _ in pages] == ["1", "2"]
    assert all(int(p) > 0 for _, p in pages)
    assert re.search(r"[\d.]+ cores busy", out)
