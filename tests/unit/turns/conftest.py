"""A world for the turn tests: a fresh store per test, a scripted model, a gate tool."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

import agentkeep as ak


class Gate:
    """A tool's latch: the test sees the tool start, and lets it finish."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()


GATE = Gate()


class GateArgs(msgspec.Struct):
    pass


@ak.tool
def gate(ctx: ak.ToolContext, args: GateArgs) -> str:
    """Wait until the test opens the gate."""
    GATE.started.set()
    if not GATE.release.wait(30):
        raise TimeoutError("the test never opened the gate")
    return "opened"


class TurnWorld:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.model = ak.ScriptedModel()
        self.systems: list[ak.AgentSystem] = []

    def open(self, **options: Any) -> ak.AgentSystem:
        providers = ak.Providers()
        providers.add("local", self.model, kind="gym")
        system = ak.AgentSystem.open(
            self.home, providers=providers, provider="local", model="gym-1", tools=[gate], **options
        )
        self.systems.append(system)
        return system


@pytest.fixture
def world(tmp_path: Path) -> Iterator[TurnWorld]:
    GATE.started.clear()
    GATE.release.clear()
    w = TurnWorld(tmp_path / "state")
    yield w
    GATE.release.set()
    for system in w.systems:
        system.close(timeout_seconds=10)


def turn_events(system: ak.AgentSystem, session_id: str) -> list[tuple[str, str | None]]:
    """(type, turn_id) of the session's turn.* events, in order."""
    return [
        (e.type, e.turn_id)
        for e in system.events(session_id, limit=1000)
        if e.type.startswith("turn.")
    ]
