"""Live checks against the real vendor APIs.

They run only when asked for by name **and** the vendor's key is in the environment::

    ANTHROPIC_API_KEY=... OPENAI_API_KEY=... .venv/bin/pytest tests/live/test_live_vendors.py

A plain ``pytest`` run collects them and skips them with a message. Models can be chosen with
``AGENTKEEP_LIVE_ANTHROPIC_MODEL`` / ``AGENTKEEP_LIVE_OPENAI_MODEL``; an OpenAI-compatible
server is tried when ``AGENTKEEP_LIVE_CHAT_BASE_URL`` and ``AGENTKEEP_LIVE_CHAT_MODEL`` are set.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from agentkeep.providers.protocol import CancelToken
from agentkeep.types import (
    AssistantMessage,
    Context,
    Done,
    ModelSessionOptions,
    ReasoningBlock,
    ReasoningEnd,
    Selection,
    StreamEvent,
    TextBlock,
    TextEnd,
    ToolCallBlock,
    ToolCallEnd,
    ToolCallStart,
    ToolDescriptor,
    ToolResultMessage,
    UserMessage,
)

pytestmark = pytest.mark.live

THIS_FILE = "test_live_vendors"
ADD = ToolDescriptor(
    name="add",
    description="Add two integers and return the sum.",
    parameters={
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
)


@pytest.fixture(autouse=True)
def _only_when_selected_by_name(request: pytest.FixtureRequest) -> None:
    args = request.config.invocation_params.args
    if not any(
        THIS_FILE in str(arg) or str(arg).rstrip("/").endswith("tests/live") for arg in args
    ):
        pytest.skip(
            f"live vendor tests run only when selected by name: pytest tests/live/{THIS_FILE}.py"
        )


def need(*names: str) -> dict[str, str]:
    missing = [name for name in names if not os.environ.get(name)]
    if missing:
        pytest.skip(f"live vendor test needs {', '.join(missing)} in the environment")
    return {name: os.environ[name] for name in names}


def stream(session, context: Context, selection: Selection) -> list[StreamEvent]:
    events = list(session.stream(context, selection, CancelToken()))
    assert sum(isinstance(e, Done) for e in events) == 1
    assert isinstance(events[-1], Done)
    return events


def assistant_from(events: list[StreamEvent]) -> AssistantMessage:
    """The finished blocks, as the agent loop would keep them."""
    blocks: list[TextBlock | ReasoningBlock | ToolCallBlock] = []
    starts = {e.call_id: e for e in events if isinstance(e, ToolCallStart)}
    for event in events:
        if isinstance(event, TextEnd):
            blocks.append(TextBlock(text=event.text, vendor=event.vendor))
        elif isinstance(event, ReasoningEnd):
            blocks.append(
                ReasoningBlock(text=event.text, reasoning=event.reasoning, vendor=event.vendor)
            )
        elif isinstance(event, ToolCallEnd) and not starts[event.call_id].server:
            start = starts[event.call_id]
            blocks.append(
                ToolCallBlock(
                    call_id=event.call_id,
                    name=start.name,
                    namespace=start.namespace,
                    arguments=event.arguments,
                )
            )
    return AssistantMessage(content=tuple(blocks))


def tool_turn(make_provider: Callable[[], object], selection: Selection) -> None:
    """A turn with a tool call, answered, then the model's final answer (reasoning replayed)."""
    provider = make_provider()
    try:
        session = provider.open_model_session(
            "live-1", ModelSessionOptions(instructions="Use tools.", tools=(ADD,))
        )
        ask = UserMessage(content=(TextBlock(text="Use the add tool to add 20 and 22."),))
        context = Context(instructions="Use the add tool for arithmetic.", messages=(ask,))
        first = stream(session, context, selection)
        assert first[-1].state == "tool_call", first[-1]
        assistant = assistant_from(first)
        calls = [b for b in assistant.content if isinstance(b, ToolCallBlock)]
        assert calls
        assert calls[0].name == "add"
        results = tuple(
            ToolResultMessage(call_id=c.call_id, content=(TextBlock(text="42"),)) for c in calls
        )
        second = stream(
            session,
            Context(instructions=context.instructions, messages=(ask, assistant, *results)),
            selection,
        )
        assert second[-1].state == "normal", second[-1]
        assert "42" in "".join(e.text for e in second if isinstance(e, TextEnd))
        session.close()
    finally:
        provider.close()


def test_anthropic_tool_turn_with_thinking_replayed():
    keys = need("ANTHROPIC_API_KEY")
    from agentkeep.providers.anthropic import AnthropicProvider

    model = os.environ.get("AGENTKEEP_LIVE_ANTHROPIC_MODEL", "claude-haiku-4-5")
    tool_turn(
        lambda: AnthropicProvider(
            api_key=keys["ANTHROPIC_API_KEY"], model=model, thinking_mode="budget"
        ),
        Selection(effort="minimal"),
    )


def test_openai_responses_tool_turn_with_reasoning_replayed():
    keys = need("OPENAI_API_KEY")
    from agentkeep.providers.openai_responses import OpenAIProvider

    model = os.environ.get("AGENTKEEP_LIVE_OPENAI_MODEL", "gpt-5-mini")
    tool_turn(
        lambda: OpenAIProvider(api_key=keys["OPENAI_API_KEY"], model=model), Selection(effort="low")
    )


def test_openai_compatible_chat_tool_turn():
    env = need("AGENTKEEP_LIVE_CHAT_BASE_URL", "AGENTKEEP_LIVE_CHAT_MODEL")
    from agentkeep.providers.openai_chat import OpenAICompatibleProvider

    tool_turn(
        lambda: OpenAICompatibleProvider(
            base_url=env["AGENTKEEP_LIVE_CHAT_BASE_URL"], model=env["AGENTKEEP_LIVE_CHAT_MODEL"]
        ),
        Selection(),
    )
