"""Takeover time of a dead worker's partitions: after SIGKILL, and after SIGSTOP.

Each trial (``tests/unit/cluster/takeover.py``): a worker child process and an in-process
worker share a store's partitions evenly (each runs its partitions' real advisory locks);
the child is SIGKILLed or SIGSTOPped, and the time from the signal until the in-process
worker runs every partition is measured. After SIGKILL the server sees the death at once
(the socket closes), so the bound is a tick plus reaping and opening; after SIGSTOP it does
not, so the bound is the lease (then the stopped worker's sessions are terminated and its
partitions opened). Each trial uses a fresh schema.

Run: ``.venv/bin/python bench/cluster_takeover.py [--trials N] [--lease-ms MS] [--tick-ms MS]``
with ``AGENTKEEP_TEST_POSTGRES_URL`` naming a server, or without it to start a throwaway
cluster (``scripts/postgres_cluster.py``, the PostgreSQL server binaries installed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.postgres_server import URL_VARIABLE, cluster_script, fresh_schema  # noqa: E402
from tests.unit.cluster.takeover import Takeover, measure  # noqa: E402


def run(server: str, args: argparse.Namespace, scratch: Path) -> None:
    for sig in (signal.SIGKILL, signal.SIGSTOP):
        results: list[Takeover] = []
        for trial in range(args.trials):
            with fresh_schema(server) as url:
                results.append(
                    measure(
                        url,
                        sig,
                        count=args.count,
                        lease_ms=args.lease_ms,
                        tick_ms=args.tick_ms,
                        log=scratch / f"{sig.name}-{trial}.log",
                    )
                )
        seconds = [r.seconds * 1000 for r in results]
        print(
            f"{sig.name:8} trials={len(seconds):3}  median={statistics.median(seconds):7.0f} ms  "
            f"max={max(seconds):7.0f} ms  min={min(seconds):7.0f} ms  "
            f"(lease {args.lease_ms} ms, tick {args.tick_ms} ms, {args.count} partitions, "
            f"{len(results[0].victim_partitions)} taken over)",
            flush=True,
        )
        leaves = [r.leave_seconds * 1000 for r in results if r.leave_seconds is not None]
        if leaves:
            print(
                f"{'leave':8} trials={len(leaves):3}  median={statistics.median(leaves):7.0f} ms  "
                f"max={max(leaves):7.0f} ms  min={min(leaves):7.0f} ms  "
                "(the resumed worker then left gracefully: until the other ran every partition)",
                flush=True,
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--lease-ms", type=int, default=3000)
    parser.add_argument("--tick-ms", type=int, default=100)
    parser.add_argument("--count", type=int, default=16)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="agentkeep-takeover-") as scratch:
        server = os.environ.get(URL_VARIABLE)
        if server:
            run(server, args, Path(scratch))
            return 0
        script = cluster_script()
        directory = Path(tempfile.mkdtemp(prefix="agentkeep-pg-"))
        try:
            server = script.start(directory, timeout=60)
            try:
                run(server, args, Path(scratch))
            finally:
                script.stop(directory)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
