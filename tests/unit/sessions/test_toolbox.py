"""``toolbox.toolIds`` selects the tools the native loop offers, by one rule:
an empty list offers every tool the system offers; a non-empty one exactly the tools it names.
The ids it may name are the system's tools and its features' catalogs; an unknown one is
refused at session start, naming the field and the known ids."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
from tests.unit.sessions.conftest import NoArgs, lookup, shell, status

import agentkeep as ak
from agentkeep.sessions import SessionConfigError

TIMEOUT = 30.0


class Expression(msgspec.Struct, frozen=True):
    """An arithmetic expression."""

    expression: str


class Calculator(ak.Feature):
    """Offers ``calculator`` and ``clock`` the way the CLI offers its demo tools: a feature."""

    name = "calculator"

    def __init__(self) -> None:
        self.ran: list[str] = []

        @ak.tool(durable=True)
        def calculator(ctx: ak.ToolContext, args: Expression) -> str:
            """Evaluate an arithmetic expression."""
            self.ran.append("calculator")
            return "84"

        @ak.tool(durable=True)
        def clock(ctx: ak.ToolContext, args: NoArgs) -> str:
            """The time."""
            self.ran.append("clock")
            return "noon"

        self.offered: tuple[ak.Tool[Any, Any], ...] = (calculator, clock)

    def tools(self, ctx: ak.HookContext) -> Sequence[ak.Tool[Any, Any]]:
        return self.offered

    def tool_catalog(self) -> Sequence[ak.Tool[Any, Any]]:
        return self.offered


@pytest.fixture
def opened(tmp_path: Path) -> Iterator[tuple[ak.AgentSystem, ak.ScriptedModel, Calculator]]:
    model = ak.ScriptedModel()
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    feature = Calculator()
    with ak.AgentSystem.open(
        tmp_path / "state",
        providers=providers,
        provider="local",
        model="gym-1",
        tools=[lookup, status, shell],
        features=[feature],
    ) as system:
        yield system, model, feature


def _offered(model: ak.ScriptedModel) -> list[str]:
    """The ids of the tools the model's last opened session was given."""
    return sorted(
        t.name if t.namespace is None else f"{t.namespace}.{t.name}"
        for t in model.model_sessions[-1].options.tools
    )


def _turn(system: ak.AgentSystem, session_id: str) -> None:
    handle = system.sessions.send(session_id, "go")
    system.sessions.wait(session_id, handle.turn.id, timeout_seconds=TIMEOUT)
    assert system.wait_for_idle(session_id, timeout_seconds=TIMEOUT)


def test_naming_a_features_tool_offers_exactly_it(
    opened: tuple[ak.AgentSystem, ak.ScriptedModel, Calculator],
) -> None:
    system, model, feature = opened
    system.registry.create({"id": "calc", "toolbox": {"toolIds": ["calculator"]}})
    session = system.sessions.start("calc")
    # The model asks for the named tool and for one it was not offered.
    model.add(
        ak.script.tool_calls(
            ak.script.call("calculator", {"expression": "12 * 7"}),
            ak.script.call("lookup", {}),
        ),
        ak.script.text("84"),
    )
    _turn(system, session.id)
    assert _offered(model) == ["calculator"]
    assert feature.ran == ["calculator"]  # "lookup" was never run: it answered an error
    results = [m for m in system.transcript(session.id) if isinstance(m, ak.ToolResultMessage)]
    assert [r.is_error for r in results] == [False, True]


def test_naming_system_and_feature_tools_offers_those(
    opened: tuple[ak.AgentSystem, ak.ScriptedModel, Calculator],
) -> None:
    system, model, _ = opened
    system.registry.create({"id": "mixed", "toolbox": {"toolIds": ["git.status", "clock"]}})
    session = system.sessions.start("mixed")
    model.add(ak.script.text("ok"))
    _turn(system, session.id)
    assert _offered(model) == ["clock", "git.status"]


def test_an_empty_list_offers_every_tool_the_system_offers(
    opened: tuple[ak.AgentSystem, ak.ScriptedModel, Calculator],
) -> None:
    system, model, _ = opened
    system.registry.create({"id": "all"})
    session = system.sessions.start("all")
    model.add(ak.script.text("ok"))
    _turn(system, session.id)
    every = ["calculator", "clock", "git.status", "lookup", "shell"]
    assert _offered(model) == every
    agent = system.create()  # as to an agent made without a definition
    model.add(ak.script.text("ok"))
    system.send(agent.id, ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    assert _offered(model) == every


def test_an_unknown_id_is_refused_at_start_naming_the_field_and_the_known_ids(
    opened: tuple[ak.AgentSystem, ak.ScriptedModel, Calculator],
) -> None:
    system, _, _ = opened
    system.registry.create({"id": "typo", "toolbox": {"toolIds": ["calculator", "calculater"]}})
    with pytest.raises(SessionConfigError) as refused:
        system.sessions.start("typo")
    assert refused.value.field == "toolbox.toolIds[1]"
    assert '"calculater"' in str(refused.value)
    assert "calculator, clock, git.status, lookup, shell" in str(refused.value)
    assert system.sessions.list() == []
