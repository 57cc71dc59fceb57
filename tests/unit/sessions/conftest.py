"""A real store in ``tmp_path`` behind ``AgentSystem``, with two scripted providers and tools.

``local`` serves ``gym-1`` and ``gym-2``; ``other`` (the system's default provider) serves
``o-1``. The system's tools are ``lookup`` and ``git.status`` (``status`` in namespace
``git``); its base instructions are :data:`SYSTEM_INSTRUCTIONS`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest

import agentkeep as ak

TIMEOUT = 30.0
SYSTEM_INSTRUCTIONS = "You are the system's default agent."


class NoArgs(msgspec.Struct):
    """No arguments."""


@ak.tool
def lookup(ctx: ak.ToolContext, args: NoArgs) -> str:
    """Look something up."""
    return "found"


@ak.tool(namespace="git")
def status(ctx: ak.ToolContext, args: NoArgs) -> str:
    """The working tree's status."""
    return "clean"


@ak.tool
def shell(ctx: ak.ToolContext, args: NoArgs) -> str:
    """Run a shell command."""
    return "ran"


@dataclass
class World:
    """Opens systems over one store; every system opened is closed at the end."""

    path: Path
    local: ak.ScriptedModel = field(
        default_factory=lambda: ak.ScriptedModel(models=["gym-1", "gym-2"])
    )
    other: ak.ScriptedModel = field(default_factory=lambda: ak.ScriptedModel(models=["o-1"]))
    systems: list[ak.AgentSystem] = field(default_factory=list)

    def open(self, tools: Sequence[ak.Tool[Any, Any]] | None = None) -> ak.AgentSystem:
        """A system over the store (the providers' scripts and records carry over), with
        ``tools`` (default: all three)."""
        providers = ak.Providers()
        providers.add("local", self.local, kind="gym")
        providers.add("other", self.other, kind="gym")
        system = ak.AgentSystem.open(
            self.path,
            providers=providers,
            provider="other",
            model="o-1",
            tools=[lookup, status, shell] if tools is None else tools,
            instructions=SYSTEM_INSTRUCTIONS,
        )
        self.systems.append(system)
        return system


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(path=tmp_path / "state")
    yield made
    for system in made.systems:
        system.close(timeout_seconds=10)


def run_turn(system: ak.AgentSystem, session_id: str, text: str) -> None:
    """Send ``text`` to the session and wait until its loop is idle again."""
    system.send(session_id, ak.user(text))
    assert system.wait_for_idle(session_id, timeout_seconds=TIMEOUT)


REVIEWER = {
    "id": "reviewer",
    "instructions": "Find correctness risks before style issues.",
    "model": {"id": "local/gym-2", "settings": {"effort": "high", "serviceTier": "priority"}},
    "toolbox": {"toolIds": ["git.status", "lookup"]},
}
