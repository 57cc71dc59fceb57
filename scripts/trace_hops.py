"""Trace one REST message from its request to the commit and out on the SSE stream.

Starts a daemon in this process on a temporary state directory (the deterministic scripted
model), opens the session's event stream, then records, on every thread, each call into an
``agentkeep`` function while one ``POST /v1/sessions/:id/messages`` (``wait: false``) is
accepted and its ``message.accepted`` event reaches the stream. Printed: the modules entered
(and how many), the threads that ran agentkeep code, and the hops — each time consecutive
agentkeep calls on one thread change module — per thread. Only the public API is used, so the
script runs on older trees too (to compare).

Run: ``PYTHONPATH=src .venv/bin/python scripts/trace_hops.py``.
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
from collections import Counter, defaultdict
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.server import RunningServer, ServeOptions

TOKEN = "trace-token-0123456789abcdef"


class Tracer:
    """Every agentkeep call, as (thread name, module), in order per thread."""

    def __init__(self) -> None:
        self.calls: dict[str, list[str]] = defaultdict(list)
        self.on = False

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.on or event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if module.startswith("agentkeep"):
            self.calls[threading.current_thread().name].append(module)

    def install(self) -> None:
        threading.setprofile(self)
        sys.setprofile(self)


def main() -> int:
    providers = ak.Providers()
    providers.add("local", ak.ScriptedModel([script.text("Done.")] * 10), kind="gym")
    tracer = Tracer()
    tracer.install()  # before any thread starts: threading.setprofile reaches only new ones
    with tempfile.TemporaryDirectory() as tmp:
        system = ak.AgentSystem.open(
            Path(tmp) / "state", providers=providers, provider="local", model="gym-1"
        )
        server = RunningServer(system, ServeOptions(port=0, token=TOKEN)).start()
        try:
            system.create(id="traced")
            headers = {"Authorization": f"Bearer {TOKEN}"}
            seen = threading.Event()
            seen_type: list[str] = []
            streaming = threading.Event()

            def follow() -> None:
                with (
                    httpx.Client(base_url=server.url, headers=headers, timeout=30) as client,
                    client.stream("GET", "/v1/sessions/traced/events/stream") as r,
                ):
                    streaming.set()
                    for line in r.iter_lines():
                        if tracer.on and line.startswith("data:"):
                            tracer.on = False  # the first event after the POST began
                            seen_type.append(json.loads(line[5:]).get("type", "?"))
                            seen.set()
                            return

            reader = threading.Thread(target=follow, name="sse-client", daemon=True)
            reader.start()
            streaming.wait(10)
            with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
                tracer.on = True
                response = client.post(
                    "/v1/sessions/traced/messages", json={"message": "Go.", "wait": False}
                )
                seen.wait(10)
            tracer.on = False
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
            print(f"POST answered {response.status_code}; first event out: {seen_type}")
        finally:
            server.stop()
            system.close()
    modules: Counter[str] = Counter()
    hops = 0
    report: dict[str, dict[str, Any]] = {}
    for thread, calls in tracer.calls.items():
        path = [m for i, m in enumerate(calls) if i == 0 or calls[i - 1] != m]
        hops += len(path) - 1
        modules.update(set(calls))
        report[thread] = {"calls": len(calls), "modules": len(set(calls)), "hops": len(path) - 1}
    print(f"modules entered: {len(modules)}; threads running agentkeep code: {len(report)};")
    print(f"module hops (consecutive calls on one thread changing module): {hops}")
    for thread, figures in sorted(report.items(), key=lambda kv: -kv[1]["calls"]):
        print(f"  {thread:40s} {json.dumps(figures)}")
    by_package: Counter[str] = Counter(".".join(m.split(".")[:2]) for m in modules)
    print("modules by package:", dict(sorted(by_package.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
