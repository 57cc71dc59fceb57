"""A worker process for the coordinator's failover tests: a coordinator over ``LockRunner``.

``python worker_child.py URL COUNT LEASE_MS TICK_MS`` joins the store's workers and prints one
JSON line each time the partitions it runs change: ``{"pid", "token", "owned": [...]}``
(the first once it has joined). It leaves gracefully when its stdin closes.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.unit.cluster.lock_runner import LockRunner

from agentkeep.cluster import Coordinator, CoordinatorSettings


def main() -> None:
    url, count, lease_ms, tick_ms = sys.argv[1], *map(int, sys.argv[2:5])
    settings = CoordinatorSettings(count=count, lease_ms=lease_ms, tick_ms=tick_ms)
    coordinator = Coordinator(url, LockRunner(url), settings).start()
    stdin_closed = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.read()
        stdin_closed.set()
        coordinator.wake()

    threading.Thread(target=watch_stdin, daemon=True).start()
    shown: list[int] | None = None
    while not stdin_closed.is_set():
        owned = sorted(coordinator.owned())
        if owned != shown:
            shown = owned
            line = {"pid": os.getpid(), "token": coordinator.token, "owned": owned}
            print(json.dumps(line), flush=True)
        coordinator.wait_until(
            lambda c, seen=owned: stdin_closed.is_set() or sorted(c.owned()) != seen, timeout=5
        )
    coordinator.stop()
    print(json.dumps({"pid": os.getpid(), "left": True}), flush=True)


if __name__ == "__main__":
    main()
