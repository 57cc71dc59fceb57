"""Server tools' visibility: a provider-owned server tool may hide its live
call/result events (``visible_to_user=False``) and its history (``persist_in_history=False``);
the loop still keeps its call and result in the private model context. Executable tools
cannot hide."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.types import ServerToolResultBlock, StreamEvent, TextEnd, ToolCallBlock

from .conftest import EchoArgs, World, text_of

SEARCH = {"type": "web_search_20250305"}


class Watcher(ak.Feature):
    """Collects every live event the loop lets features observe."""

    name = "watcher"

    def __init__(self) -> None:
        self.events: list[StreamEvent] = []

    def on_event(self, ctx: ak.HookContext, event: StreamEvent) -> None:
        self.events.append(event)


def _call_ids(events: list[StreamEvent]) -> set[str]:
    return {e.call_id for e in events if hasattr(e, "call_id")}


def _server_blocks(messages: object) -> list[Any]:
    return [
        b
        for m in messages  # type: ignore[attr-defined]
        if isinstance(m, ak.AssistantMessage)
        for b in m.content
        if isinstance(b, ToolCallBlock | ServerToolResultBlock)
    ]


def _run(world: World, tool: ak.ProviderTool, watcher: Watcher) -> tuple[ak.AgentSystem, ak.Agent]:
    world.model.add(
        script.server_tool_call("web_search", {"q": "x"}, result="found", answer="here"),
        script.text("again"),
    )
    system = world.open(provider_tools=[tool], features=[watcher])
    agent = system.create()
    agent.send(ak.user("search"))
    agent.wait_for_idle(timeout_seconds=10)
    agent.send(ak.user("more"))
    agent.wait_for_idle(timeout_seconds=10)
    return system, agent


def test_a_server_tool_is_declared_to_the_provider_and_shown_by_default(world: World) -> None:
    watcher = Watcher()
    system, agent = _run(world, ak.ProviderTool(name="web_search", server=SEARCH), watcher)

    [descriptor] = [d for d in world.model.model_sessions[0].options.tools if d.server is not None]
    assert (descriptor.name, descriptor.server) == ("web_search", SEARCH)
    assert _call_ids(watcher.events) == {"server-web_search"}
    assert len(_server_blocks(agent.transcript())) == 2
    types = [e.type for e in system.events(agent.id) if e.type == "assistant.block"]
    assert len(types) == 4  # the call, its result, "here", "again"


def test_a_hidden_server_tool_has_no_live_events(world: World) -> None:
    watcher = Watcher()
    tool = ak.ProviderTool(name="web_search", server=SEARCH, visible_to_user=False)
    _, agent = _run(world, tool, watcher)

    assert _call_ids(watcher.events) == set()  # neither its call nor its result was observed
    assert [e for e in watcher.events if isinstance(e, TextEnd)]  # the answer still was
    assert len(_server_blocks(agent.transcript())) == 2  # it is still in the history


def test_an_unpersisted_server_tool_stays_out_of_the_history_but_not_the_model_context(
    world: World,
) -> None:
    watcher = Watcher()
    tool = ak.ProviderTool(name="web_search", server=SEARCH, persist_in_history=False)
    system, agent = _run(world, tool, watcher)

    # Not published: no transcript or history entry, no ledger event.
    assert _server_blocks(agent.transcript()) == []
    assert [text_of(m) for m in agent.transcript()] == ["search", "here", "more", "again"]
    assert all(_server_blocks(epoch.messages) == [] for epoch in agent.history())
    blocks = [e.data["block"] for e in system.events(agent.id) if e.type == "assistant.block"]
    assert [b["type"] for b in blocks] == ["text", "text"]
    # Still in the private model context: the next request carries the call and its result.
    later = world.model.requests[1].context.messages
    kept = _server_blocks(later)
    assert [type(b).__name__ for b in kept] == ["ToolCallBlock", "ServerToolResultBlock"]
    assert kept[0].server
    # Its live events were not hidden (that is the other flag).
    assert _call_ids(watcher.events) == {"server-web_search"}


def test_an_unpersisted_server_tool_stays_hidden_after_a_restart(world: World) -> None:
    tool = ak.ProviderTool(name="web_search", server=SEARCH, persist_in_history=False)
    world.model.add(
        script.server_tool_call("web_search", {"q": "x"}, result="found", answer="here")
    )
    system = world.open(provider_tools=[tool])
    agent = system.create()
    agent.send(ak.user("search"))
    agent.wait_for_idle(timeout_seconds=10)
    system.close(timeout_seconds=10)

    world.model.add(script.text("again"))
    reopened = world.open(provider_tools=[tool])
    again = reopened.resolve(agent.id)
    again.send(ak.user("more"))
    again.wait_for_idle(timeout_seconds=10)

    assert _server_blocks(again.transcript()) == []
    assert len(_server_blocks(world.model.requests[-1].context.messages)) == 2


@pytest.mark.parametrize("flag", ["visible_to_user", "persist_in_history"])
def test_an_executable_tool_cannot_hide(flag: str) -> None:
    with pytest.raises(ak.ToolDefinitionError, match=f"sets {flag}=False.*cannot hide"):

        @ak.tool(**{flag: False})
        def peek(ctx: ak.ToolContext, args: EchoArgs) -> str:
            """Try to hide."""
            return ""

    def run(ctx: ak.ToolContext, args: EchoArgs) -> str:
        return ""

    with pytest.raises(ak.ToolDefinitionError, match="only a provider-owned tool"):
        ak.Tool(name="peek", args_type=EchoArgs, result_type=str, execute=run, **{flag: False})


def test_a_server_tool_is_checked_when_the_system_opens(world: World) -> None:
    with pytest.raises(ak.ToolDefinitionError, match=r'descriptor as a mapping with a "type"'):
        ak.ProviderTool(name="web_search", server={})
    with pytest.raises(ak.ToolDefinitionError, match='Tool "echo" is defined twice'):
        world.open(provider_tools=[ak.ProviderTool(name="echo", server=SEARCH)])
    with pytest.raises(ak.InvalidConfigError, match=r"provider_tools\[0\]"):
        world.open(provider_tools=[msgspec.Struct])
