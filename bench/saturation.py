"""The daemon under load, in one run (issue 29 item 3): its acceptance against a bare Starlette
route, and its turns at 100 and 200 clients against the same turns driven in-process.

1. A bare Starlette route (``POST /bare/:id``: parse the JSON body, answer 202) under uvicorn's
   h11 protocol: the baseline of requests/s.
2. ``POST /v1/sessions/:id/messages`` with ``wait: false`` through a daemon whose model hangs
   each session's first turn, so every message accepted behind it only queues: the daemon's
   acceptance (auth, JSON, the acceptance transaction, the reply) and nothing else.
3. ``wait: true`` turns at 100 and 200 clients, each client its own session; the model answers
   at once (a scripted text), so the figures are the daemon's own cost.
4. The same turns in-process: 100 threads on ``system.sessions`` (send, then wait).

Every client posts with a new ``Idempotency-Key`` and retries a 503 after its ``Retry-After``.
The clients are :class:`RawClient` s (HTTP/1.1 over one keep-alive socket each, written by
hand) in child processes (this file run with ``--drive``), split over ``--client-processes``:
httpx's client cost ~10 ms of CPU a turn, so the first version of this bench (one process of
httpx clients) held a core at 82 % while the daemon used 33 %, and measured its clients. The
servers run in threads of the bench's process, so the thread count sampled during a phase is
the server's plus two.

Printed per phase: requests (or turns)/s, p50 and p99 latency (retries included), the 503
refusals and the most threads seen; then the ratios against the goals: wait=false vs the bare
route [≥ 0.5x], 200 clients vs 100 [≥ 0.9x], the daemon at 100 clients vs in-process [≥ 0.5x].

Run: ``PYTHONPATH=src .venv/bin/python bench/saturation.py [--seconds 5] [--clients 100 200]
[--client-processes 2]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

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


class RawClient:
    """One keep-alive HTTP/1.1 connection spoken by hand: a load generator must cost far less
    than the server it loads. httpx's ``AsyncClient`` spent ~10 ms of CPU per turn, so one
    client process of 100 of them held a core at 82 % while the daemon used 33 %: the bench
    measured its own clients."""

    def __init__(self, host: str, port: int) -> None:
        self._host, self._port = host, port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def post(
        self, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self._host, self._port)
        assert self._reader is not None
        lines = [f"POST {path} HTTP/1.1", f"Host: {self._host}:{self._port}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}", "", ""]
        self._writer.write("\r\n".join(lines).encode("ascii") + body)
        head = await self._reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        fields = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(":") for line in header_lines if line)
        }
        payload = await self._reader.readexactly(int(fields.get("content-length", "0")))
        if fields.get("connection", "").lower() == "close":
            self._writer.close()
            self._reader = self._writer = None
        return int(status_line.split(" ")[1]), fields, payload

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


async def _drive(
    url: str, first: int, clients: int, seconds: float, prefix: str, path_format: str, wait: bool
) -> dict[str, object]:
    """``clients`` clients (numbered from ``first``) posting to ``path_format`` for
    ``seconds``; each request a new idempotency key; a 503 retried after its Retry-After."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    latencies: list[float] = []
    refusals = 0
    stop = time.monotonic() + seconds

    async def one(index: int) -> None:
        nonlocal refusals
        client = RawClient(host, int(port))
        path = path_format.format(f"{prefix}{index}")
        try:
            while time.monotonic() < stop:
                key = uuid.uuid4().hex
                body = json.dumps({"message": "Go.", "idempotencyKey": key, "wait": wait})
                headers = {"Authorization": f"Bearer {TOKEN}", "Idempotency-Key": key}
                started = time.monotonic()
                while True:
                    status, fields, payload = await client.post(path, body.encode(), headers)
                    if status != 503:
                        break
                    refusals += 1
                    await asyncio.sleep(float(fields.get("retry-after", "1")))
                if status not in (200, 201, 202):
                    raise RuntimeError(f"{status}: {payload[:500]!r}")
                latencies.append(time.monotonic() - started)
        finally:
            client.close()

    started = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process on the machine
    await asyncio.gather(*(one(index) for index in range(first, first + clients)))
    return {
        "latencies": latencies,
        "refusals": refusals,
        "started": started,
        "ended": time.monotonic(),
    }


def _drive_elsewhere(
    url: str,
    clients: int,
    seconds: float,
    prefix: str,
    *,
    processes: int,
    path_format: str = "/v1/sessions/{}/messages",
    wait: bool = True,
) -> dict[str, float]:
    """:func:`_drive` in ``processes`` child processes (this file with ``--drive``), the
    clients split between them: the clients' CPU is not the daemon's."""
    share = [clients // processes + (1 if i < clients % processes else 0) for i in range(processes)]
    firsts = [sum(share[:i]) for i in range(processes)]
    children = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--drive",
                url,
                str(first),
                str(count),
                str(seconds),
                prefix,
                path_format,
                "wait" if wait else "nowait",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for first, count in zip(firsts, share, strict=True)
        if count
    ]
    latencies: list[float] = []
    refusals = 0
    starts: list[float] = []
    ends: list[float] = []
    for child in children:
        out, err = child.communicate(timeout=seconds + 300)
        if child.returncode != 0:
            raise RuntimeError(f"a client process failed: {err[-2000:]}")
        figures = json.loads(out)
        latencies += figures["latencies"]
        refusals += figures["refusals"]
        starts.append(figures["started"])
        ends.append(figures["ended"])
    elapsed = max(ends) - min(starts)
    return {
        "per_second": len(latencies) / elapsed,
        "p50": _percentile(latencies, 0.5),
        "p99": _percentile(latencies, 0.99),
        "refusals": refusals,
    }


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


class BareServer:
    """The baseline for acceptance: one Starlette route that parses the same JSON body and
    answers 202, under uvicorn's own h11 protocol, in a thread of this process."""

    def __init__(self) -> None:
        async def bare(request: Request) -> JSONResponse:
            body = await request.json()
            return JSONResponse({"accepted": body["idempotencyKey"]}, status_code=202)

        app = Starlette(routes=[Route("/bare/{id}", bare, methods=["POST"])])
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off", http="h11")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    def __enter__(self) -> BareServer:
        self._thread.start()
        while not self._server.started:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join()
        self._socket.close()


def _acceptance(clients: int, seconds: float, processes: int) -> dict[str, float]:
    """``POST …/messages`` with ``wait: false`` through a daemon of its own, whose model hangs
    each session's first turn (until close cancels it): the messages accepted behind it queue
    and cost no model work, as the bare route does none."""
    providers = ak.Providers()
    providers.add("held", ak.ScriptedModel([script.hang()] * clients, record=False), kind="gym")
    with tempfile.TemporaryDirectory() as tmp:
        system = ak.AgentSystem.open(
            Path(tmp) / "state", providers=providers, provider="held", model="gym-1"
        )
        try:
            server = RunningServer(system, ServeOptions(port=0, token=TOKEN)).start()
            try:
                for index in range(clients):
                    system.create(id=f"accept{index}")
                with Sampler() as sampler:
                    figures = _drive_elsewhere(
                        server.url, clients, seconds, "accept", processes=processes, wait=False
                    )
                figures["threads"] = sampler.most
            finally:
                server.stop()
            for index in range(clients):  # the hung turns end; the queued ones are taken back
                system.abort(f"accept{index}")
        finally:
            system.close(timeout_seconds=30)
    return figures


def _line(name: str, figures: dict[str, float], unit: str) -> None:
    print(
        f"{name:34s} {figures['per_second']:8.1f} {unit}/s  p50 {figures['p50'] * 1000:7.1f} ms"
        f"  p99 {figures['p99'] * 1000:7.1f} ms  refusals {figures['refusals']:5.0f}"
        f"  threads {figures.get('threads', 0):4.0f}"
    )


def main(argv: list[str] | None = None) -> int:
    """Run the bench and print its figures."""
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--drive"]:  # a client process: URL FIRST COUNT SECONDS PREFIX PATH WAIT
        url, first, count, seconds, prefix, path_format, wait = argv[1:8]
        figures = asyncio.run(
            _drive(url, int(first), int(count), float(seconds), prefix, path_format, wait == "wait")
        )
        print(json.dumps(figures))
        return 0
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, nargs="+", default=[100, 200])
    parser.add_argument(
        "--client-processes", type=int, default=2, help="processes the clients are split over"
    )
    args = parser.parse_args(argv)
    first = args.clients[0]
    processes = args.client_processes
    with BareServer() as bare, Sampler() as sampler:
        baseline = _drive_elsewhere(
            bare.url,
            first,
            args.seconds,
            "b",
            processes=processes,
            path_format="/bare/{}",
            wait=False,
        )
    baseline["threads"] = sampler.most
    _line(f"bare Starlette route, {first} clients", baseline, "requests")
    accepted = _acceptance(first, args.seconds, processes)
    _line(f"POST messages wait=false, {first}", accepted, "requests")
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
                        figures = _drive_elsewhere(
                            server.url, clients, args.seconds, prefix, processes=processes
                        )
                    figures["threads"] = sampler.most
                    results[clients] = figures
                    _line(f"turns, wait=true, {clients} clients", figures, "turns")
            finally:
                server.stop()
            local = _in_process(system, first, args.seconds)
        finally:
            system.close(timeout_seconds=30)
    print(f"{'turns in-process, ' + str(first) + ' threads':34s} {local:8.1f} turns/s")
    ratio = accepted["per_second"] / baseline["per_second"]
    print(f"wait=false vs a bare Starlette route: {ratio:.2f}x [goal >= 0.5x]")
    if len(args.clients) > 1:
        last = args.clients[-1]
        ratio = results[last]["per_second"] / results[first]["per_second"]
        print(f"{last} vs {first} clients: {ratio:.2f}x [goal >= 0.9x]")
    print(
        f"daemon at {first} clients vs in-process: "
        f"{results[first]['per_second'] / local:.2f}x [goal >= 0.5x]"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
