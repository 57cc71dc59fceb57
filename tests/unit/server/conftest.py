"""A real daemon for the server tests: uvicorn on 127.0.0.1, an ephemeral port, real sockets.

``served`` is a fresh system and server per test; ``shared`` one per module (for the tests
that only read, or that make their own ids). Clients are httpx over TCP.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

import agentkeep as ak
from agentkeep.drivers import Driver
from agentkeep.server import RunningServer, ServeOptions

TOKEN = "test-token-0123456789-abcdefghijklmnop"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TIMEOUT = 30.0


@dataclass
class Served:
    """A running daemon over an open system."""

    system: ak.AgentSystem
    server: RunningServer
    model: ak.ScriptedModel

    @property
    def url(self) -> str:
        return self.server.url

    def client(self, *, auth: bool = True, **options: Any) -> httpx.Client:
        headers = dict(AUTH) if auth else {}
        headers.update(options.pop("headers", {}))
        return httpx.Client(base_url=self.url, headers=headers, timeout=TIMEOUT, **options)

    def stop(self) -> None:
        self.server.stop()
        self.system.close(timeout_seconds=10)


def serve(home: Path, *, drivers: Sequence[Driver] = (), **options: Any) -> Served:
    model = ak.ScriptedModel()
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    system = ak.AgentSystem.open(
        home, providers=providers, provider="local", model="gym-1", drivers=list(drivers)
    )
    try:
        settings: dict[str, Any] = {"port": 0, "token": TOKEN, "heartbeat_seconds": 0.2}
        settings.update(options)
        server = RunningServer(system, ServeOptions(**settings)).start()
    except BaseException:
        system.close()
        raise
    return Served(system=system, server=server, model=model)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    running = serve(tmp_path / "state")
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    running = serve(tmp_path_factory.mktemp("shared") / "state")
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def client(served: Served) -> Iterator[httpx.Client]:
    with served.client() as opened:
        yield opened
