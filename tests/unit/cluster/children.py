"""Worker child processes (``worker_child.py``) for the failover tests and the takeover
measurement: start one, read its JSON lines with a timeout, signal it, end it."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

CHILD = Path(__file__).resolve().parent / "worker_child.py"


class Child:
    """One worker process and the lines it printed (read on a thread of its own)."""

    def __init__(self, url: str, count: int, lease_ms: int, tick_ms: int, log: Path) -> None:
        self._log = log.open("w")
        self.process = subprocess.Popen(
            [sys.executable, str(CHILD), url, str(count), str(lease_ms), str(tick_ms)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.last: dict[str, Any] = {}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{"):
                self.lines.put(json.loads(line))

    def wait_for(self, predicate: Any, timeout: float = 30.0) -> dict[str, Any]:
        """The first line from now on (or the last one seen) for which ``predicate`` holds."""
        if self.last and predicate(self.last):
            return self.last
        while True:
            try:
                self.last = self.lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(
                    f"worker {self.process.pid} printed no matching line in {timeout} s "
                    f"(last: {self.last})"
                ) from None
            if predicate(self.last):
                return self.last

    def leave(self, timeout: float = 30.0) -> None:
        """Close its stdin (a graceful leave) and wait for it to exit."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.wait_for(lambda line: line.get("left") is True, timeout)
        assert self.process.wait(timeout=timeout) == 0

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._reader.join(timeout=30)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None and not stream.closed:
                stream.close()
        self._log.close()
