"""Turns through the daemon under load: 100 and 200 clients sending ``wait: true`` turns, next
to the same turns driven in-process through ``system.sessions``, in one run (issue 29 item 3).

Each client has its own session and loops: ``POST /v1/sessions/:id/messages`` (``wait: true``,
an ``Idempotency-Key``) until the turn is terminal, retrying a 503 after its ``Retry-After``.
The model answers at once (a scripted text), so the figures are the daemon's own cost. The
clients are ``httpx.AsyncClient`` tasks on one event loop in a child process (this file run
with ``--drive``), as a daemon's clients are: in the daemon's own process their CPU took
about half of the GIL the daemon needs, halving what it could serve. The server is
``RunningServer`` (uvicorn, h11) in its own thread of the bench's process, so the thread
count sampled during the run is the server's plus two.

Printed: turns/s, p50 and p99 latency of a turn (its retries included), the 503 refusals, and
the most threads seen; the ratio of 200 clients' turns/s to 100's [goal ≥ 0.9x] and of the
daemon's turns/s at 100 clients to in-process turns/s with 100 threads [goal ≥ 0.5x].

Run: ``PYTHONPATH=src .venv/bin/python bench/saturation.py [--seconds 5] [--clients 100 200]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.server import RunningServer, ServeOptions

TOKEN = "bench-token-0123456789abcdef"


class Sampler:
    """The most threads alive, sampled every 50 ms while it runs."""

    def __init__(self) -> None:
        self.most = threading.active_count()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.most = max(self.most, threading.active_count())

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _drive(url: str, clients: int, seconds: float, prefix: str) -> dict[str, float]:
    latencies: list[float] = []
    refusals = 0
    stop = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(
        base_url=url, headers=headers, limits=limits, timeout=120.0
    ) as client:

        async def one(index: int) -> None:
            nonlocal refusals
            path = f"/v1/sessions/{prefix}{index}/messages"
            while time.monotonic() < stop:
                key = uuid.uuid4().hex
                started = time.monotonic()
                while True:
                    response = await client.post(
                        path, json={"message": "Go.", "idempotencyKey": key, "wait": True}
                    )
                    if response.status_code != 503:
                        break
                    refusals += 1
                    await asyncio.sleep(float(response.headers.get("retry-after", "1")))
                if response.status_code != 200:
                    raise RuntimeError(f"{response.status_code}: {response.text}")
                latencies.append(time.monotonic() - started)

        started = time.monotonic()
        await asyncio.gather(*(one(index) for index in range(clients)))
        elapsed = time.monotonic() - started
    return {
        "turns_per_second": len(latencies) / elapsed,
        "p50": _percentile(latencies, 0.5),
        "p99": _percentile(latencies, 0.99),
        "refusals": refusals,
    }


def _drive_elsewhere(url: str, clients: int, seconds: float, prefix: str) -> dict[str, float]:
    """:func:`_drive` in a child process (this file with ``--drive``): the clients' CPU is not
    the daemon's."""
    done = subprocess.run(
        [sys.executable, __file__, "--drive", url, str(clients), str(seconds), prefix],
        capture_output=True,
        text=True,
        check=False,
        timeout=seconds + 300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the client process failed: {done.stderr[-2000:]}")
    figures: dict[str, float] = json.loads(done.stdout)
    return figures


def _in_process(system: ak.AgentSystem, clients: int, seconds: float) -> float:
    for index in range(clients):
        system.create(id=f"inproc{index}")
    counts = [0] * clients
    stop = time.monotonic() + seconds

    def run(index: int) -> None:
        sessions = system.sessions
        while time.monotonic() < stop:
            sent = sessions.send(f"inproc{index}", "Go.")
            sessions.wait(f"inproc{index}", sent.turn.id, timeout_seconds=120)
            counts[index] += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.monotonic() - started)


def main(argv: list[str] | None = None) -> int:
    """Run the bench and print its figures."""
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--drive"]:  # the client process: URL CLIENTS SECONDS PREFIX
        url, clients, seconds, prefix = argv[1:5]
        print(json.dumps(asyncio.run(_drive(url, int(clients), float(seconds), prefix))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, nargs="+", default=[100, 200])
    args = parser.parse_args(argv)
    providers = ak.Providers()
    providers.add(
        "local", ak.ScriptedModel([script.text("Done.")] * 500_000, record=False), kind="gym"
    )
    results: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        system = ak.AgentSystem.open(
            Path(tmp) / "state", providers=providers, provider="local", model="gym-1"
        )
        try:
            server = RunningServer(system, ServeOptions(port=0, token=TOKEN)).start()
            try:
                for clients in args.clients:
                    prefix = f"c{clients}x"
                    for index in range(clients):
                        system.create(id=f"{prefix}{index}")
                    with Sampler() as sampler:
                        figures = _drive_elsewhere(server.url, clients, args.seconds, prefix)
                    figures["threads"] = sampler.most
                    results[clients] = figures
                    print(
                        f"{clients:4d} clients  {figures['turns_per_second']:8.1f} turns/s"
                        f"  p50 {figures['p50'] * 1000:7.1f} ms  p99 {figures['p99'] * 1000:7.1f}"
                        f" ms  refusals {figures['refusals']:5.0f}  threads {sampler.most}"
                    )
            finally:
                server.stop()
            first = args.clients[0]
            local = _in_process(system, first, args.seconds)
        finally:
            system.close(timeout_seconds=30)
    print(f"in-process, {first} threads  {local:8.1f} turns/s")
    if len(args.clients) > 1:
        last = args.clients[-1]
        ratio = results[last]["turns_per_second"] / results[first]["turns_per_second"]
        print(f"{last} vs {first} clients: {ratio:.2f}x [goal >= 0.9x]")
    print(
        f"daemon at {first} clients vs in-process: "
        f"{results[first]['turns_per_second'] / local:.2f}x [goal >= 0.5x]"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
