"""``agentkeep workers`` (the command line as a subprocess) against live coordinators."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import psycopg
from tests.unit.cluster.lock_runner import LockRunner
from tests.unit.subprocesses import AGENTKEEP

from agentkeep.cluster import Coordinator, CoordinatorSettings, membership
from agentkeep.persistence.postgres.connection import parse_url

COUNT = 4


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*AGENTKEEP, *args], capture_output=True, text=True, timeout=60, check=False, env=env
    )


def test_workers_lists_the_live_workers_their_partitions_and_the_locks(postgres_url: str) -> None:
    settings = CoordinatorSettings(
        count=COUNT, lease_ms=3000, tick_ms=50, address="http://127.0.0.1:9001"
    )
    with Coordinator(postgres_url, LockRunner(postgres_url), settings) as coordinator:
        assert coordinator.wait_until(lambda c: len(c.owned()) == COUNT, 30)
        # its row names them (the heartbeat after the last acquisition)
        target = parse_url(postgres_url)
        with psycopg.connect(
            target.conninfo, autocommit=True, options=f"-c search_path={target.schema}"
        ) as admin:
            assert coordinator.wait_until(
                lambda _: len(membership.read_workers(admin)[0].partitions) == COUNT, 30
            )
        listed = run("workers", "--database", postgres_url, "--json")
        assert listed.returncode == 0, listed.stderr
        value: dict[str, Any] = json.loads(listed.stdout)
        (worker,) = value["workers"]
        assert worker["token"] == coordinator.token
        assert worker["pid"] == os.getpid()
        assert worker["address"] == "http://127.0.0.1:9001"
        assert worker["live"] is True
        assert worker["leaseMs"] == 3000
        assert [p["partition"] for p in worker["partitions"]] == list(range(COUNT))
        assert all(p["since"].endswith("Z") for p in worker["partitions"])
        assert value["locks"] == [
            {"partition": i, "worker": coordinator.token} for i in range(COUNT)
        ]
        assert "password" not in value["store"]
        # The global option works as well, and the text names each partition.
        text = run("--database", postgres_url, "workers")
        assert text.returncode == 0, text.stderr
        assert f"{coordinator.token}  pid {os.getpid()}" in text.stdout
        assert "live" in text.stdout
        assert "partition    3  since" in text.stdout
    after = run("workers", "--database", postgres_url, "--json")
    assert json.loads(after.stdout)["workers"] == []


def test_a_dead_worker_shows_as_dead_until_a_live_one_reaps_it(postgres_url: str) -> None:
    target = parse_url(postgres_url)
    with psycopg.connect(
        target.conninfo, autocommit=True, options=f"-c search_path={target.schema}"
    ) as admin:
        membership.create_table(admin, target.schema)
        admin.execute(
            "INSERT INTO agentkeep_workers (token, pid, host, application_name, backend_pid,"
            " started_ms, heartbeat_ms, lease_ms, partitions)"
            " VALUES ('gone', 1, 'elsewhere', 'agentkeep pid=1 host=elsewhere c=gone', 1,"
            " 1000, 2000, 3000, '{\"2\": 1500}')"
        )
    listed = run("workers", "--database", postgres_url)
    assert listed.returncode == 0, listed.stderr
    assert "gone  pid 1 on elsewhere  DEAD" in listed.stdout
    assert "partition    2  since 1970-01-01T00:00:01.500Z" in listed.stdout


def test_workers_needs_a_postgresql_store() -> None:
    env = {k: v for k, v in os.environ.items() if k != "AGENTKEEP_DATABASE"}
    refused = run("workers", "--json", env=env)
    assert refused.returncode == 2
    assert json.loads(refused.stderr)["error"]["code"] == "not_postgres"
