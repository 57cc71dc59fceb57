"""A world for the ledger tests: a fresh store per test, a scripted model, an echo tool."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

import agentkeep as ak
from agentkeep.sessions import SessionEvent


class EchoArgs(msgspec.Struct):
    text: str = ""


@ak.tool
def echo(ctx: ak.ToolContext, args: EchoArgs) -> str:
    """Echo the text back."""
    return f"echo {args.text}"


@ak.tool
def big(ctx: ak.ToolContext, args: EchoArgs) -> str:
    """Return a long text (bigger than a small ledger limit)."""
    return "x" * 4000


class LedgerWorld:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.model = ak.ScriptedModel()
        self.systems: list[ak.AgentSystem] = []

    def providers(self) -> ak.Providers:
        providers = ak.Providers()
        providers.add("local", self.model, kind="gym")
        return providers

    def open(self, **options: Any) -> ak.AgentSystem:
        system = ak.AgentSystem.open(
            self.home,
            providers=options.pop("providers", None) or self.providers(),
            provider="local",
            model="gym-1",
            tools=[echo, big],
            **options,
        )
        self.systems.append(system)
        return system


@pytest.fixture
def world(tmp_path: Path) -> Iterator[LedgerWorld]:
    w = LedgerWorld(tmp_path / "state")
    yield w
    for system in w.systems:
        system.close(timeout_seconds=10)


def types_of(events: list[SessionEvent]) -> list[str]:
    return [e.type for e in events]


def all_events(system: ak.AgentSystem, session_id: str) -> list[SessionEvent]:
    events: list[SessionEvent] = []
    while page := system.events(session_id, after=len(events), limit=1000):
        events.extend(page)
    return events
