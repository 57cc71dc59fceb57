"""The workers of :mod:`agentkeep.chaos.worker_failover`: ``agentkeep serve --partitions``
child processes in slots (a killed worker's slot gets a new process), asked over REST.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

WORKERS = 3
PARTITIONS = 6
LEASE = 2.0
TOKEN = "failover-chaos-token-0123456789"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
SETTLE_SECONDS = 120.0
KEEP_WRITING_AFTER_LOST = "keep_writing_after_lost"
PROVIDERS = """
[providers.slow]
kind = "gym"
class = "responding"
latency_seconds = 0.05

[defaults]
provider = "slow"
"""


class Worker:
    """One ``agentkeep serve --partitions`` child process."""

    def __init__(
        self, home: Path, url: str, *, lease: float, mutant: str | None, generation: int
    ) -> None:
        home.mkdir(parents=True, exist_ok=True)
        (home / "providers.toml").write_text(PROVIDERS)
        self.log = home.parent / f"{home.name}-{generation}.log"
        self._log = self.log.open("w")
        env = {**os.environ, "AGENTKEEP_DAEMON_TOKEN": TOKEN}
        self.process = subprocess.Popen(
            [
                *_command(mutant),
                *("--home", str(home), "--json", "--log-level", "info", "serve"),
                *("--port", "0", "--database", url, "--partitions", str(PARTITIONS)),
                *("--lease", str(lease)),
            ],
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=env,
        )
        self.url = str(json.loads(_first_line(self.process))["url"])

    def partitions(self) -> set[int] | None:
        """The partitions it runs by its health, None if it does not answer."""
        try:
            health = httpx.get(f"{self.url}/healthz", headers=HEADERS, timeout=1.0).json()
        except (httpx.HTTPError, ValueError):
            return None
        return {int(p) for p in health.get("coordinator", {}).get("partitions", {})}

    def close(self) -> None:
        """SIGCONT (if stopped), SIGTERM, wait; SIGKILL if it does not leave."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        assert self.process.stdout is not None
        self.process.stdout.close()
        self._log.close()


def _command(mutant: str | None) -> tuple[str, ...]:
    """The command line of a worker: ``python -m agentkeep.cli``, or with the mutant
    installed first (tests only)."""
    if mutant is None:
        return (sys.executable, "-m", "agentkeep.cli")
    if mutant != KEEP_WRITING_AFTER_LOST:
        raise ValueError(f"unknown mutant {mutant!r}")
    return (sys.executable, "-c", _MUTANT_SERVE)


#: A worker with the mutant: a partition's writer whose session was cut reconnects without
#: taking its locks again or checking the ownership row, so it writes on after it lost them.
_MUTANT_SERVE = (
    "import sys\n"
    "from agentkeep.chaos._mutants.ownership import install_reconnect_without_lock_mutant\n"
    "install_reconnect_without_lock_mutant()\n"
    "from agentkeep.cli import cli\n"
    "sys.argv[0] = 'agentkeep'\n"
    "cli()\n"
)


def _first_line(process: subprocess.Popen[str], timeout: float = 60.0) -> str:
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    try:
        if not selector.select(timeout):
            raise RuntimeError("a worker printed no listening line")
        return process.stdout.readline()
    finally:
        selector.close()


class Pool:
    """The worker slots; a killed worker's slot gets a new process."""

    def __init__(self, base: Path, url: str, lease: float, mutant: str | None) -> None:
        self.base, self.url, self.lease, self.mutant = base, url, lease, mutant
        self.lock = threading.Lock()
        self.generations = [1] * WORKERS
        self.workers = [self._start(slot) for slot in range(WORKERS)]
        self.stopped: set[int] = set()
        self.retired: list[Worker] = []

    def _start(self, slot: int) -> Worker:
        return Worker(
            self.base / f"w{slot}",
            self.url,
            lease=self.lease,
            mutant=self.mutant,
            generation=self.generations[slot],
        )

    def restart(self, slot: int) -> None:
        """A new process in ``slot`` (the old one must have ended)."""
        with self.lock:
            self.retired.append(self.workers[slot])
            self.generations[slot] += 1
        worker = self._start(slot)
        with self.lock:
            self.workers[slot] = worker

    def url_of(self, slot: int) -> str:
        """The REST address of the worker in ``slot`` now (a restarted one's new port)."""
        with self.lock:
            return self.workers[slot].url

    def covered(self, without: int | None = None) -> bool:
        """Every partition run by exactly one worker (``without`` left out and not asked)."""
        owned: list[int] = []
        for slot, worker in enumerate(list(self.workers)):
            if slot == without or slot in self.stopped:
                continue
            found = worker.partitions()
            if found is None:
                return False
            owned += found
        return sorted(owned) == list(range(PARTITIONS))

    def close(self) -> None:
        """Stop every worker, the running ones and those a kill retired."""
        for worker in [*self.workers, *self.retired]:
            worker.close()


def wait_until(condition: Callable[[], bool], timeout: float) -> float | None:
    """Seconds until ``condition()`` held, polling (another process's state: no event to
    wait on); None if it did not within ``timeout``."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            return None
        time.sleep(0.05)  # polling other processes' health over sockets
    return time.monotonic() - started


__all__ = [
    "HEADERS",
    "KEEP_WRITING_AFTER_LOST",
    "LEASE",
    "PARTITIONS",
    "SETTLE_SECONDS",
    "WORKERS",
    "Pool",
    "Worker",
    "wait_until",
]
