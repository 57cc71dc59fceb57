"""Child processes of the tests that run things for real (``agentkeep serve``, a script
owning a store): ``agentkeep``'s command line, and reading what a child prints."""

from __future__ import annotations

import selectors
import subprocess
import sys
from typing import IO

#: ``agentkeep``'s command line through this interpreter (the checkout under test).
AGENTKEEP = (sys.executable, "-m", "agentkeep.cli")
#: How long a child may take to print its first line.
TIMEOUT = 30.0


def first_line(process: subprocess.Popen[str], timeout: float = TIMEOUT) -> str:
    """The first line ``process`` prints on stdout (``serve``'s listening line); fails if
    nothing is printed within ``timeout`` seconds instead of blocking the test."""
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    try:
        assert selector.select(timeout), "serve printed nothing"
        return process.stdout.readline()
    finally:
        selector.close()


def wait_for_line(stream: IO[str], text: str) -> None:
    """Read ``stream`` up to the line ``text`` (skipping anything else, such as logs)."""
    for line in stream:
        if line.strip() == text:
            return
    raise AssertionError(f"the owner exited before printing {text!r}")
