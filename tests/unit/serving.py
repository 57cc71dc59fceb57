"""``agentkeep`` as a child process, for the tests that run ``serve`` (or any command) for real:
the command line, and the first line a child prints, waited for within a bound."""

from __future__ import annotations

import selectors
import subprocess
import sys

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
