"""Requests per second of the daemon, next to a bare Starlette route on the same uvicorn setup,
measured in the same run; and events per second of one session's SSE stream, next to the
in-process subscription it is built on.

- ``GET /v1/sessions/:id/events?limit=20`` (auth, guard, a store read in a worker thread,
  encoding) against ``GET /bare`` (a Starlette route answering ``{"ok": true}``, no
  middleware), each served by uvicorn (h11) in a thread on 127.0.0.1 and driven by
  ``--clients`` httpx clients with keep-alive, each in its own thread.
- ``POST /v1/sessions/:id/messages`` with ``wait: false`` (a durable turn per request; each
  client has its own session, whose loop answers meanwhile).
- Streaming a backlog of ``--events`` committed events through
  ``/v1/sessions/:id/events/stream`` against iterating ``system.subscribe`` directly.

The clients share the machine with the server (Python, the GIL): the numbers compare the two
routes, they are not a capacity claim. Run: ``.venv/bin/python bench/serve_requests.py``.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

import httpx
import uvicorn
from httpx_sse import connect_sse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.server import RunningServer, ServeOptions

TOKEN = "bench-token-0123456789abcdef"


def drive(
    url: str,
    path: str,
    *,
    clients: int,
    seconds: float,
    headers: dict[str, str],
    post: bool = False,
) -> float:
    """Requests per second from ``clients`` keep-alive clients for ``seconds`` (``post``: each
    client sends ``wait: false`` messages to its own session, ``path`` formatted with its
    index)."""
    counts = [0] * clients
    stop = time.monotonic() + seconds

    def run(index: int) -> None:
        target = path.format(index)

        def once() -> None:
            if post:
                body = {"message": "ping", "wait": False}
                client.post(target, json=body).raise_for_status()
            else:
                client.get(target).raise_for_status()

        with httpx.Client(base_url=url, headers=headers) as client:
            once()  # warm up the connection
            while time.monotonic() < stop:
                once()
                counts[index] += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.monotonic() - started)


def bare_server() -> tuple[uvicorn.Server, threading.Thread, str]:
    async def bare(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    config = uvicorn.Config(
        Starlette(routes=[Route("/bare", bare)]),
        host="127.0.0.1",
        port=0,
        log_config=None,
        access_log=False,
        lifespan="off",
        http="h11",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    return server, thread, f"http://127.0.0.1:{port}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--events", type=int, default=2000)
    args = parser.parse_args()
    providers = ak.Providers()
    # Every turn sent by the POST measurement is answered (the loop runs meanwhile, as it would).
    providers.add(
        "local", ak.ScriptedModel([script.text("ok")] * 200_000, record=False), kind="gym"
    )
    with tempfile.TemporaryDirectory() as tmp:
        system = ak.AgentSystem.open(
            Path(tmp) / "state", providers=providers, provider="local", model="gym-1"
        )
        agent = system.create(id="bench")
        for n in range(args.events):
            system.update_metadata(agent.id, {"n": n})
        for index in range(args.clients):
            system.create(id=f"post{index}")
        server = RunningServer(system, ServeOptions(port=0, token=TOKEN)).start()
        bare, bare_thread, bare_url = bare_server()
        auth = {"Authorization": f"Bearer {TOKEN}"}
        try:
            baseline = drive(
                bare_url, "/bare", clients=args.clients, seconds=args.seconds, headers={}
            )
            events = drive(
                server.url,
                "/v1/sessions/bench/events?limit=20",
                clients=args.clients,
                seconds=args.seconds,
                headers=auth,
            )
            posts = drive(
                server.url,
                "/v1/sessions/post{}/messages",
                clients=args.clients,
                seconds=args.seconds,
                headers=auth,
                post=True,
            )
            started = time.monotonic()
            subscription = system.subscribe("bench")
            for _ in range(args.events):
                subscription.next(timeout_seconds=30)
            subscription.close()
            direct = args.events / (time.monotonic() - started)
            started = time.monotonic()
            received = 0
            with (
                httpx.Client(base_url=server.url, headers=auth, timeout=30) as client,
                connect_sse(client, "GET", "/v1/sessions/bench/events/stream") as source,
            ):
                for frame in source.iter_sse():
                    if frame.data:
                        received += 1
                        if received == args.events:
                            break
            streamed = args.events / (time.monotonic() - started)
        finally:
            server.stop()
            bare.should_exit = True
            bare_thread.join(5)
            system.close()
    print(f"GET /bare (bare Starlette route)            {baseline:9.0f} req/s")
    print(f"GET /v1/sessions/:id/events?limit=20         {events:9.0f} req/s")
    print(f"POST /v1/sessions/:id/messages (wait=false)  {posts:9.0f} req/s")
    print(f"system.subscribe, in process                 {direct:9.0f} events/s")
    print(f"GET /v1/sessions/:id/events/stream (SSE)     {streamed:9.0f} events/s")


if __name__ == "__main__":
    main()
