"""Each vendor adapter is a Provider whose sessions are Sessions, closed exactly once."""

from __future__ import annotations

import pytest

from agentkeep.errors import ModelSessionClosedError
from agentkeep.providers.anthropic import AnthropicProvider
from agentkeep.providers.openai_chat import OpenAICompatibleProvider
from agentkeep.providers.openai_responses import OpenAIProvider
from agentkeep.providers.protocol import ModelSession, Provider
from agentkeep.types import ModelSessionOptions

MAKERS = {
    "anthropic": lambda: AnthropicProvider(api_key="k", base_url="http://127.0.0.1:9"),
    "responses": lambda: OpenAIProvider(api_key="k", base_url="http://127.0.0.1:9/v1"),
    "chat": lambda: OpenAICompatibleProvider(
        base_url="http://127.0.0.1:9/v1", model="m", api_key="k"
    ),
}


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_adapters_keep_the_provider_protocol_and_a_session_closes_once(name):
    provider = MAKERS[name]()
    try:
        assert isinstance(provider, Provider)
        session = provider.open_model_session("agent-1", ModelSessionOptions(instructions="x"))
        assert isinstance(session, ModelSession)
        session.close()
        with pytest.raises(ModelSessionClosedError):
            session.close()
    finally:
        provider.close()


def test_compatibility_kinds_are_claude_and_codex():
    assert AnthropicProvider.kind == "claude"
    assert OpenAIProvider.kind == "codex"
