"""A real store in ``tmp_path``, opened through ``AgentSystem`` (no provider is needed)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import agentkeep as ak

Opener = Callable[[], ak.AgentSystem]


@pytest.fixture
def open_system(tmp_path: Path) -> Iterator[Opener]:
    """Opens the system in ``tmp_path / "state"``; every system opened is closed at the end."""
    systems: list[ak.AgentSystem] = []

    def open_() -> ak.AgentSystem:
        system = ak.AgentSystem.open(tmp_path / "state", providers=ak.Providers())
        systems.append(system)
        return system

    yield open_
    for system in systems:
        system.close(timeout_seconds=10)


@pytest.fixture
def registry(open_system: Opener) -> ak.Registry:
    return open_system().registry
