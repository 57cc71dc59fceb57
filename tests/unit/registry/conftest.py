"""A real store in ``tmp_path``, opened through ``AgentSystem``.

No provider runs here; the ones registered serve the models the tests' definitions name
(``openai/gpt``, ``openai/gpt-5.5``, ``anthropic/claude``, ``a/b``), since a definition's
``model.id`` is checked against the system's providers when it is written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import agentkeep as ak
from agentkeep.registry import Registry

Opener = Callable[[], ak.AgentSystem]


@pytest.fixture
def open_system(tmp_path: Path) -> Iterator[Opener]:
    """Opens the system in ``tmp_path / "state"``; every system opened is closed at the end."""
    systems: list[ak.AgentSystem] = []

    def open_() -> ak.AgentSystem:
        providers = ak.Providers()
        providers.add("openai", ak.ScriptedModel(models=["gpt", "gpt-5.5"]), kind="codex")
        providers.add("anthropic", ak.ScriptedModel(models=["claude"]), kind="claude")
        providers.add("a", ak.ScriptedModel(models=["b"]), kind="gym")
        system = ak.AgentSystem.open(tmp_path / "state", providers=providers)
        systems.append(system)
        return system

    yield open_
    for system in systems:
        system.close(timeout_seconds=10)


@pytest.fixture
def registry(open_system: Opener) -> Registry:
    return open_system().registry
