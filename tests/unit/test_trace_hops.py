"""``scripts/trace_hops.py`` follows one REST message from the request to the commit and out
on the SSE stream: it runs, the message is accepted (202), the stream's first event after it
is the turn being queued, and it names the threads and modules the message went through."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_one_message_is_traced_from_request_to_stream() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "trace_hops.py")],
        capture_output=True,
        text=True,
        timeout=100,
        check=True,
    )
    out = done.stdout
    assert "POST answered 202; first event out: ['turn.queued']" in out
    entered = re.search(r"modules entered: (\d+); threads running agentkeep code: (\d+);", out)
    assert entered is not None
    assert int(entered.group(1)) > 20
    assert int(entered.group(2)) >= 3
    assert re.search(r"module hops \(consecutive calls on one thread changing module\): \d+", out)
    # The request thread, the worker that runs the acceptance and the store's writer (its
    # actor's thread, whichever backend it owns).
    assert "agentkeep-http" in out
    assert "StoreWriter-" in out
