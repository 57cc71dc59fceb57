"""Providers declare the models they serve: local models their own names,
vendor adapters their family; the registry's check refuses the rest, naming what is served."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from agentkeep.cli.config import load_providers
from agentkeep.errors import InvalidConfigError, ModelNotServedError, UnknownProviderError
from agentkeep.providers import (
    AnthropicProvider,
    OpenAICompatibleProvider,
    OpenAIProvider,
    Providers,
    RespondingModel,
    ScriptedModel,
    ServesModels,
)
from agentkeep.providers.demo import DemoModel
from agentkeep.providers.protocol import Provider


@pytest.mark.parametrize(
    ("make", "served", "refused"),
    [
        (RespondingModel, ["gym-1"], ["gym-2", "openai/gpt-5", ""]),
        (lambda: RespondingModel(models=("a", "b")), ["a", "b"], ["gym-1"]),
        (ScriptedModel, ["gym-1"], ["gym-2"]),
        (DemoModel, ["demo-1"], ["gym-1", "demo-2"]),
    ],
)
def test_local_models_serve_only_their_own_names(
    make: Callable[[], ServesModels], served: list[str], refused: list[str]
) -> None:
    model = make()
    assert isinstance(model, ServesModels)
    assert [m for m in served if model.serves(m)] == served
    assert [m for m in refused if model.serves(m)] == []


def test_a_local_model_needs_a_name() -> None:
    with pytest.raises(ValueError, match="models"):
        RespondingModel(models=())


def test_vendor_adapters_serve_their_family() -> None:
    anthropic = AnthropicProvider(api_key="k", base_url="http://127.0.0.1:9")
    responses = OpenAIProvider(api_key="k", base_url="http://127.0.0.1:9/v1")
    chat = OpenAICompatibleProvider(base_url="http://127.0.0.1:9/v1", model="m", api_key="k")
    try:
        assert anthropic.serves("claude-sonnet-4-6")
        assert anthropic.serves("anthropic/claude-opus-4")
        assert not anthropic.serves("gym-2")
        assert not anthropic.serves("gpt-5")
        assert "claude-*" in anthropic.served_models
        assert responses.serves("gpt-5.2")
        assert responses.serves("openai/o3")
        assert not responses.serves("claude-sonnet-4-6")
        assert not responses.serves("anthropic/claude-x")
        assert chat.serves("qwen3-8b")
        assert chat.serves("meta-llama/Llama-3.1-8B")
        assert "127.0.0.1:9" in chat.served_models
    finally:
        for provider in (anthropic, responses, chat):
            provider.close()


def test_the_registry_refuses_an_unserved_model_and_names_what_is_served() -> None:
    providers = Providers()
    providers.add("local", RespondingModel(), kind="gym")
    providers.check_model("local", "gym-1")
    with pytest.raises(ModelNotServedError) as refused:
        providers.check_model("local", "gym-2")
    assert str(refused.value) == (
        'Provider "local" does not serve model "gym-2"; it serves: gym-1.'
    )
    assert isinstance(refused.value, InvalidConfigError)  # bad input: the CLI exits 2
    assert (refused.value.provider_id, refused.value.model) == ("local", "gym-2")
    with pytest.raises(UnknownProviderError):
        providers.check_model("nobody", "gym-1")


def test_a_provider_or_factory_that_declares_nothing_serves_everything() -> None:
    calls: list[str | None] = []

    def factory(provider_id: str, model: str | None) -> Provider:
        calls.append(model)
        return RespondingModel()

    providers = Providers()
    providers.add("built", factory, kind="gym")
    providers.check_model("built", "anything")
    assert calls == []  # the check never builds what a plain factory would build


def test_the_clis_configured_providers_declare_their_models(tmp_path: Path) -> None:
    (tmp_path / "providers.toml").write_text(
        '[providers.other]\nkind = "gym"\nclass = "responding"\nmodel = "my-local"\n'
        '[providers.server]\nkind = "gym"\nclass = "openai-compatible"\n'
        'base_url = "http://127.0.0.1:9/v1"\nmodel = "qwen3-8b"\n'
    )
    providers = load_providers(tmp_path).providers
    providers.check_model("other", "my-local")
    with pytest.raises(ModelNotServedError, match='"other" does not serve model "gym-1"'):
        providers.check_model("other", "gym-1")
    providers.check_model("server", "any-name-at-all")
    providers.check_model("demo", "demo-1")
    with pytest.raises(ModelNotServedError, match="it serves: demo-1"):
        providers.check_model("demo", "demo-2")
