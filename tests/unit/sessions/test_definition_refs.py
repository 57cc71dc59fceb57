"""A definition's references reach the native loop: ``workspace.cwd``, ``resources`` and
``driver.config`` on every tool and hook context of its sessions, with the agent's
settings and config; ``authRef`` through the embedder's credential resolver (the
vendor-wire half is ``tests/unit/providers/vendors/test_auth_ref.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

import agentkeep as ak
from agentkeep.registry import Resources

TIMEOUT = 30.0

DEFINITION = {
    "id": "reviewer",
    "instructions": "Review.",
    "driver": {"id": "agentkeep", "config": {"sandbox": "workspace-write", "depth": 2}},
    "model": {"id": "local/gym-2", "settings": {"effort": "high", "serviceTier": "priority"}},
    "resources": {
        "files": ["AGENTS.md"],
        "skills": ["code-review"],
        "subagents": ["security-reviewer"],
    },
    "workspace": {"cwd": "/projects/product"},
}


class NoArgs(msgspec.Struct):
    """No arguments."""


seen_by_tools: list[dict[str, Any]] = []


def _fields(ctx: Any) -> dict[str, Any]:
    return {
        "agent_id": ctx.agent_id,
        "provider": ctx.provider,
        "model": ctx.model,
        "effort": ctx.effort,
        "service_tier": ctx.service_tier,
        "config": ctx.config,
        "cwd": ctx.cwd,
        "resources": ctx.resources,
        "driver_config": ctx.driver_config,
    }


@ak.tool
def where(ctx: ak.ToolContext, args: NoArgs) -> str:
    """Where am I."""
    seen_by_tools.append(_fields(ctx))
    return "here"


@ak.tool(transactional=True)
def where_tx(ctx: ak.ToolContext, args: NoArgs) -> str:
    """Where am I, in a transaction."""
    seen_by_tools.append(_fields(ctx))
    return "here"


class Probe(ak.Feature):
    """Records what its hooks are told."""

    name = "probe"

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.feature_configs: list[dict[str, Any]] = []

    def before_turn(self, ctx: ak.HookContext, turn: Any) -> None:
        self.seen.append(_fields(ctx))
        self.feature_configs.append(ctx.feature_config)

    def before_tool_call(self, ctx: ak.HookContext, call: Any) -> None:
        self.seen.append(_fields(ctx))


class Other(ak.Feature):
    name = "other"


@pytest.fixture
def local() -> ak.ScriptedModel:
    return ak.ScriptedModel(models=["gym-1", "gym-2"])


@pytest.fixture
def open_system(tmp_path: Path, local: ak.ScriptedModel) -> Iterator[Any]:
    opened: list[ak.AgentSystem] = []
    seen_by_tools.clear()

    def make(**options: Any) -> ak.AgentSystem:
        providers = ak.Providers()
        providers.add("local", local, kind="gym")
        options.setdefault("provider", "local")
        options.setdefault("model", "gym-1")
        options.setdefault("tools", [where, where_tx])
        system = ak.AgentSystem.open(tmp_path / "state", providers=providers, **options)
        opened.append(system)
        return system

    yield make
    for system in opened:
        system.close(timeout_seconds=10)


def test_tools_and_hooks_see_the_definitions_references_and_the_agents_settings(
    open_system: Any, local: ak.ScriptedModel
) -> None:
    probe = Probe()
    system = open_system(features=[probe, Other()])
    system.registry.create(DEFINITION)
    session = system.sessions.start("reviewer")
    local.add(
        ak.script.tool_calls(ak.script.call("where"), ak.script.call("where_tx")),
        ak.script.text("done"),
    )

    turn = system.sessions.send(session.id, "where are you").wait(timeout_seconds=TIMEOUT)

    assert turn.status == "completed"
    expected = {
        "agent_id": session.id,
        "provider": "local",
        "model": "gym-2",
        "effort": "high",
        "service_tier": "priority",
        "config": {"environment": None, "features": {}, "metadata": {}},
        "cwd": "/projects/product",
        "resources": Resources(
            files=["AGENTS.md"], skills=["code-review"], subagents=["security-reviewer"]
        ),
        "driver_config": {"sandbox": "workspace-write", "depth": 2},
    }
    assert seen_by_tools == [expected, expected]  # plain and transactional tools alike
    assert probe.seen == [expected, expected, expected]  # before_turn, each before_tool_call


def test_an_agent_without_a_definition_sees_its_config_and_no_references(
    open_system: Any, local: ak.ScriptedModel
) -> None:
    probe = Probe()
    system = open_system(features=[probe])
    agent = system.create(ak.AgentConfig(features={"probe": {"level": 3}}))
    local.add(ak.script.tool_call("where"), ak.script.text("done"))

    agent.send(ak.user("where"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    expected = {
        "agent_id": agent.id,
        "provider": "local",
        "model": "gym-1",
        "effort": None,
        "service_tier": None,
        "config": {"environment": None, "features": {"probe": {"level": 3}}, "metadata": {}},
        "cwd": None,
        "resources": Resources(),
        "driver_config": {},
    }
    assert seen_by_tools == [expected]
    assert probe.seen == [expected, expected]
    assert probe.feature_configs == [{"level": 3}]  # its own entry of the agent's config


def test_a_basic_tool_context_has_the_same_fields() -> None:
    ctx = ak.tools.BasicToolContext(
        settings=ak.Settings(provider="p", model="m", effort="max", service_tier="priority"),
        cwd="/w",
    )
    assert (ctx.provider, ctx.model, ctx.effort, ctx.service_tier) == ("p", "m", "max", "priority")
    assert (ctx.cwd, ctx.resources, ctx.driver_config, ctx.config) == ("/w", Resources(), {}, {})


# -- authRef without a usable credential: the turn fails, naming the reference -----------------


def _failed_turn(system: ak.AgentSystem, auth_ref: str) -> ak.sessions.TurnRecord:
    system.registry.create({**DEFINITION, "authRef": auth_ref})
    session = system.sessions.start("reviewer")
    return system.sessions.send(session.id, "hello").wait(timeout_seconds=TIMEOUT)


@pytest.mark.parametrize(
    ("credentials", "reason"),
    [
        (None, "no credential resolver is registered"),
        (lambda ref: None, "the credential resolver knows no such credential"),
        (lambda ref: 1 / 0, "the credential resolver raised ZeroDivisionError"),
    ],
)
def test_an_unresolvable_auth_ref_fails_the_turn_naming_it(
    open_system: Any, local: ak.ScriptedModel, credentials: Any, reason: str
) -> None:
    system = open_system(credentials=credentials)

    turn = _failed_turn(system, "team-key")

    assert turn.status == "failed"
    assert turn.error is not None
    assert turn.error.code == "inference_failed"
    assert 'authRef "team-key" could not be resolved' in turn.error.message
    assert reason in turn.error.message
    assert local.requests == ()  # nothing was sent to the provider


def test_a_provider_that_cannot_send_a_credential_is_not_used_under_its_own(
    open_system: Any, local: ak.ScriptedModel
) -> None:
    asked: list[str] = []
    system = open_system(credentials=lambda ref: asked.append(ref) or "s3cret")

    turn = _failed_turn(system, "team-key")

    assert asked
    assert set(asked) == {"team-key"}
    assert turn.status == "failed"
    assert turn.error is not None
    assert 'cannot send a credential, so the session\'s authRef "team-key"' in turn.error.message
    assert "s3cret" not in turn.error.message
    assert local.requests == ()


def test_credentials_must_be_a_function(tmp_path: Path) -> None:
    with pytest.raises(ak.InvalidConfigError, match="credentials must be a function"):
        ak.AgentSystem.open(tmp_path, providers=ak.Providers(), credentials="secret")  # type: ignore[typeddict-item]


def test_a_credential_never_shows_its_secret() -> None:
    credential = ak.providers.Credential("team-key", "s3cret")
    assert "s3cret" not in repr(credential)
    assert "s3cret" not in str(credential)
    assert "s3cret" not in credential.fingerprint
    assert credential == ak.providers.Credential("team-key", "s3cret")
    assert credential != ak.providers.Credential("team-key", "other")
