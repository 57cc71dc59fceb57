"""The server restarts under two workers (a throwaway cluster of this test's own, stopped in
``immediate`` mode: every session cut at once). Each worker's partitions are lost with their
sessions; once the server is back both reconnect, neither reaps the other for a session that
was gone only because of the restart, and they converge to the same even spread under the
same tokens.

Needs PostgreSQL's server binaries (``initdb``, ``pg_ctl``); skipped, saying so, without."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs
from tests.postgres_server import with_schema
from tests.unit.cluster.lock_runner import LockRunner
from tests.unit.persistence.postgres.test_server_restart import Cluster, _bin_dir, _free_port

from agentkeep.cluster import Coordinator, CoordinatorSettings

COUNT = 8


@pytest.fixture
def own_cluster() -> Iterator[Cluster]:
    bin_dir = _bin_dir()
    if bin_dir is None:
        pytest.skip("PostgreSQL's server binaries (initdb, pg_ctl) are not installed")
    directory = Path(tempfile.mkdtemp(prefix="agentkeep-pg-"))
    if os.geteuid() == 0:
        shutil.chown(directory, "postgres")
    made = Cluster(bin_dir, directory, _free_port())
    made.init()
    made.start()
    try:
        yield made
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            made.stop("immediate")
        shutil.rmtree(directory, ignore_errors=True)


def test_workers_survive_a_server_restart_without_reaping_each_other(
    own_cluster: Cluster,
) -> None:
    url = with_schema(own_cluster.url, "restart")
    # A lease longer than the restart: only sessions, not heartbeats, are gone meanwhile.
    # b ticks slowly: a reconnects first and sees b's session gone until b reconnects too.
    fast = CoordinatorSettings(count=COUNT, lease_ms=30_000, tick_ms=50)
    slow = CoordinatorSettings(count=COUNT, lease_ms=30_000, tick_ms=1000)
    a = Coordinator(url, LockRunner(url), fast).start()
    b = Coordinator(url, LockRunner(url), slow).start()
    try:
        tokens = (a.token, b.token)

        def even(_: Coordinator) -> bool:
            owned = [sorted(a.owned()), sorted(b.owned())]
            return (
                sorted(owned[0] + owned[1]) == list(range(COUNT))
                and [len(o) for o in owned] == [COUNT // 2] * 2
            )

        assert a.wait_until(even, 30)
        with capture_logs() as logs:
            own_cluster.stop("immediate")
            assert a.wait_until(lambda c: not c.health().connected, 30)
            assert a.wait_until(lambda c: not c.owned(), 30)
            own_cluster.start()
            assert a.wait_until(lambda c: c.health().healthy and even(c), 60)
            assert b.wait_until(lambda c: c.health().healthy, 60)
        assert (a.token, b.token) == tokens
        events = {e["event"] for e in logs}
        assert "cluster_partition_lost" in events
        assert "cluster_worker_reaped" not in events
        assert "cluster_expelled" not in events
    finally:
        a.stop()
        b.stop()
