"""``bench/queue_backlog.py`` runs (a short backlog) and prints every figure: it holds an
agent mid-response through a scripted model, so a change there would otherwise rot it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "queue_backlog.py"


def test_queue_backlog_reports_send_and_drain(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("queue_backlog", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    assert module.main(["--messages", "40", "--steps", "5"]) == 0

    out = capsys.readouterr().out
    assert "send, first tenth" in out
    assert "send, last tenth" in out
    assert "drain:" in out
