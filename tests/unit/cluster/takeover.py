"""One takeover, measured: a worker child process and an in-process worker share a store
evenly; the child is SIGKILLed or SIGSTOPped, and the time from the signal until the
in-process worker runs every partition is the takeover time.

Shared by ``test_failover.py`` (a few trials, with bounds) and ``bench/cluster_takeover.py``
(more trials, median and max).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import msgspec
from tests.unit.cluster.children import Child
from tests.unit.cluster.lock_runner import LockRunner

from agentkeep.cluster import Coordinator, CoordinatorSettings

TIMEOUT = 60.0


class Takeover(msgspec.Struct, frozen=True, kw_only=True):
    signal: str
    lease_ms: int
    tick_ms: int
    count: int
    #: From the signal to the surviving worker running every partition.
    seconds: float
    #: The partitions the victim ran when it was signalled.
    victim_partitions: list[int]
    #: SIGSTOP only: the victim, resumed, joined again under a new token and the two
    #: converged back to an even spread.
    rejoined: bool = False
    #: SIGSTOP only: then the victim left gracefully; from its stdin closing until the
    #: survivor ran every partition again.
    leave_seconds: float | None = None


def measure(
    url: str,
    sig: signal.Signals,
    *,
    count: int,
    lease_ms: int,
    tick_ms: int,
    log: Path,
) -> Takeover:
    settings = CoordinatorSettings(count=count, lease_ms=lease_ms, tick_ms=tick_ms)
    child = Child(url, count, lease_ms, tick_ms, log)
    survivor: Coordinator | None = None
    try:
        child.wait_for(lambda line: len(line.get("owned", ())) == count, TIMEOUT)
        survivor = Coordinator(url, LockRunner(url), settings).start()
        half = count // 2
        line = child.wait_for(lambda line: len(line.get("owned", ())) == count - half, TIMEOUT)
        assert survivor.wait_until(lambda c: len(c.owned()) == half, TIMEOUT)
        victim = list(line["owned"])
        assert not set(victim) & set(survivor.owned())
        started = time.monotonic()
        os.kill(child.process.pid, sig)
        assert survivor.wait_until(lambda c: len(c.owned()) == count, TIMEOUT)
        seconds = time.monotonic() - started
        rejoined = False
        leave_seconds: float | None = None
        if sig == signal.SIGSTOP:
            old = line["token"]
            os.kill(child.process.pid, signal.SIGCONT)
            child.wait_for(
                lambda line: (
                    line.get("token") not in (None, old)
                    and len(line.get("owned", ())) == count - half
                ),
                TIMEOUT,
            )
            assert survivor.wait_until(lambda c: len(c.owned()) == half, TIMEOUT)
            rejoined = True
            leaving = time.monotonic()
            child.leave(TIMEOUT)
            assert survivor.wait_until(lambda c: len(c.owned()) == count, TIMEOUT)
            leave_seconds = time.monotonic() - leaving
        else:
            assert child.process.wait(timeout=TIMEOUT) == -signal.SIGKILL
        return Takeover(
            signal=sig.name,
            lease_ms=lease_ms,
            tick_ms=tick_ms,
            count=count,
            seconds=seconds,
            victim_partitions=victim,
            rejoined=rejoined,
            leave_seconds=leave_seconds,
        )
    finally:
        if child.process.poll() is None:
            os.kill(child.process.pid, signal.SIGCONT)
        child.close()
        if survivor is not None:
            survivor.stop()
