"""The server goes away and comes back: a throwaway cluster of this test's own, stopped in
``immediate`` mode (a crash: no shutdown checkpoint, every session cut) while a store is
open on it. While it is down each transaction is refused as not written; once it is back
the writer reconnects, takes the lock again and writes on; nothing acknowledged is lost.

Needs PostgreSQL's server binaries (``initdb``, ``pg_ctl``); skipped, saying so, without."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentkeep.errors import StoreUnavailableError
from agentkeep.persistence.opening import open_store
from agentkeep.types.records import AgentRow


def _bin_dir() -> Path | None:
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(candidate, "initdb").exists():
            return Path(candidate)
    found = shutil.which("initdb")
    return None if found is None else Path(found).parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Cluster:
    def __init__(self, bin_dir: Path, directory: Path, port: int) -> None:
        self.bin_dir = bin_dir
        self.directory = directory
        self.port = port
        self.url = f"postgresql://postgres@127.0.0.1:{port}/postgres"

    def _run(self, *args: str) -> None:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if os.geteuid() == 0:  # the server refuses to run as root
            command = ["su", "postgres", "-c", subprocess.list2cmdline(command)]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        self._run("initdb", "-D", str(self.directory / "data"), "-A", "trust", "-U", "postgres")

    def start(self) -> None:
        options = f"-k {self.directory} -c listen_addresses=127.0.0.1 -p {self.port}"
        data, log = self.directory / "data", self.directory / "log"
        self._run("pg_ctl", "-D", str(data), "-o", options, "-l", str(log), "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.directory / "data"), "-m", mode, "-w", "stop")


@pytest.fixture
def cluster() -> Iterator[Cluster]:
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
        with contextlib.suppress(subprocess.CalledProcessError):  # already stopped
            made.stop("immediate")
        shutil.rmtree(directory, ignore_errors=True)


def _create(store: object, agent_id: str) -> None:
    store.transact(lambda tx: tx.agents.create(AgentRow(id=agent_id, config={})))  # type: ignore[attr-defined]


def test_an_immediate_restart_refuses_writes_while_down_and_loses_nothing(
    tmp_path: Path, cluster: Cluster
) -> None:
    with open_store(tmp_path / "state", database=cluster.url) as store:
        _create(store, "before")
        cluster.stop("immediate")
        with pytest.raises(StoreUnavailableError, match="not"):
            _create(store, "while-down")
        cluster.start()
        _create(store, "after")  # reconnected, the lock taken again
        present = store.read(
            lambda tx: {i: tx.agents.get(i) is not None for i in ("before", "while-down", "after")}
        )
    assert present == {"before": True, "while-down": False, "after": True}
