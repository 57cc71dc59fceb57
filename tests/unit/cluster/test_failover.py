"""Failover with real worker processes: a SIGKILLed worker's partitions are taken over
within a tick of the server noticing (well inside the lease), a SIGSTOPped one's once its
lease runs out (its sessions terminated first), and the stopped worker, resumed, finds itself
expelled and joins again."""

from __future__ import annotations

import importlib.util
import re
import signal
from pathlib import Path

import pytest
from structlog.testing import capture_logs
from tests.unit.cluster.takeover import measure

COUNT = 8


def test_a_sigkilled_workers_partitions_are_taken_over_well_inside_the_lease(
    postgres_url: str, tmp_path: Path
) -> None:
    # A long lease: the takeover must not wait for it, the server saw the death.
    lease_ms = 20_000
    with capture_logs() as logs:
        result = measure(
            postgres_url,
            signal.SIGKILL,
            count=COUNT,
            lease_ms=lease_ms,
            tick_ms=50,
            log=tmp_path / "child.log",
        )
    assert len(result.victim_partitions) == COUNT // 2
    assert result.seconds < lease_ms / 1000 / 4, result
    (reaped,) = [e for e in logs if e["event"] == "cluster_worker_reaped"]
    assert reaped["reason"] == "session_gone"
    assert sorted(reaped["partitions"]) == sorted(result.victim_partitions)


def test_a_sigstopped_workers_partitions_are_taken_over_once_its_lease_runs_out(
    postgres_url: str, tmp_path: Path
) -> None:
    lease_ms, tick_ms = 1500, 50
    with capture_logs() as logs:
        result = measure(
            postgres_url,
            signal.SIGSTOP,
            count=COUNT,
            lease_ms=lease_ms,
            tick_ms=tick_ms,
            log=tmp_path / "child.log",
        )
    # Not before its last heartbeat's lease ran out (it heartbeats every lease/3) ...
    earliest = (lease_ms - lease_ms // 3 - tick_ms) / 1000
    assert result.seconds >= earliest, result
    # ... and soon after.
    assert result.seconds < lease_ms / 1000 + 5, result
    assert result.rejoined
    # and then left gracefully: its partitions taken without waiting for any lease
    assert result.leave_seconds is not None
    assert result.leave_seconds < lease_ms / 1000, result
    reaped = [e for e in logs if e["event"] == "cluster_worker_reaped"]
    assert reaped[0]["reason"] == "lease_expired"
    # Its sessions were ended: the coordinator's and one per partition it ran.
    assert len(reaped[0]["terminated_backends"]) == 1 + COUNT // 2


def test_the_takeover_bench_prints_both_figures(
    postgres_server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = Path(__file__).resolve().parents[3] / "bench" / "cluster_takeover.py"
    spec = importlib.util.spec_from_file_location("cluster_takeover", bench)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    args = ["--trials", "1", "--lease-ms", "600", "--tick-ms", "50", "--count", "4"]
    assert module.main(args) == 0
    out = capsys.readouterr().out
    for name in ("SIGKILL", "SIGSTOP"):
        assert re.search(rf"^{name} +trials= +1 +median= +\d+ ms +max= +\d+ ms", out, re.M), out
