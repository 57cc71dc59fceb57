"""A world for the injected-driver tests: a fresh store per test, real drivers (small classes
implementing ``Driver``), sessions started from definitions that name them."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import agentkeep as ak
from agentkeep.drivers import DriverContext, DriverResult, DriverRunRequest
from agentkeep.registry import DefinitionExistsError
from agentkeep.sessions import SessionEvent


class Gated:
    """A driver that records each run and waits for the test to release it.

    ``started[n]`` is set when its n-th run (from 0) began; ``release[n]`` lets it return.
    ``honour`` makes it return (raising) as soon as it is cancelled; otherwise it ignores
    the signal until released.
    """

    def __init__(self, id: str = "gated", *, runs: int = 8, honour: bool = True) -> None:
        self.id = id
        self.honour = honour
        self.started = [threading.Event() for _ in range(runs)]
        self.release = [threading.Event() for _ in range(runs)]
        self.returned = [threading.Event() for _ in range(runs)]
        self.requests: list[DriverRunRequest] = []
        self.contexts: list[DriverContext] = []
        self.order: list[str] = []
        self._lock = threading.Lock()
        self.active = 0
        self.max_active = 0

    def run(self, request: DriverRunRequest, context: DriverContext) -> DriverResult:
        with self._lock:
            index = len(self.requests)
            self.requests.append(request)
            self.contexts.append(context)
            self.order.append(request.turn.id)
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            self.started[index].set()
            while not self.release[index].wait(0.01):
                if self.honour:
                    context.raise_if_cancelled()
            text = request.input["parts"][0]["text"]
            return DriverResult(
                message={"role": "assistant", "parts": [{"type": "text", "text": f"re: {text}"}]}
            )
        finally:
            with self._lock:
                self.active -= 1
            self.returned[index].set()


class Scripted:
    """A driver that runs ``script(request, context)`` and counts its calls."""

    def __init__(
        self,
        id: str,
        script: Callable[[DriverRunRequest, DriverContext], DriverResult | None],
    ) -> None:
        self.id = id
        self.script = script
        self.calls = 0
        self.requests: list[DriverRunRequest] = []

    def run(self, request: DriverRunRequest, context: DriverContext) -> DriverResult | None:
        self.calls += 1
        self.requests.append(request)
        return self.script(request, context)


class DriverWorld:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.model = ak.ScriptedModel()
        self.systems: list[ak.AgentSystem] = []
        self.released: list[threading.Event] = []

    def open(self, drivers: list[Any], **options: Any) -> ak.AgentSystem:
        providers = ak.Providers()
        providers.add("local", self.model, kind="gym")
        system = ak.AgentSystem.open(
            self.home,
            providers=providers,
            provider="local",
            model="gym-1",
            drivers=drivers,
            **options,
        )
        self.systems.append(system)
        return system

    def session(self, system: ak.AgentSystem, driver_id: str, name: str = "remote") -> str:
        """A session of a definition whose driver is ``driver_id``."""
        with contextlib.suppress(DefinitionExistsError):
            system.registry.create(
                {"id": name, "instructions": "be brief", "driver": {"id": driver_id}}
            )
        return system.sessions.start(name).id


@pytest.fixture
def world(tmp_path: Path) -> Iterator[DriverWorld]:
    w = DriverWorld(tmp_path / "state")
    yield w
    for event in w.released:
        event.set()
    for system in w.systems:
        system.close(timeout_seconds=10)


def events(system: ak.AgentSystem, session_id: str) -> list[SessionEvent]:
    return system.events(session_id, limit=1000)


def types_of(system: ak.AgentSystem, session_id: str) -> list[str]:
    return [e.type for e in events(system, session_id)]
