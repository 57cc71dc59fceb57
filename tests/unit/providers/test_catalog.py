"""The ``Providers`` catalog."""

from __future__ import annotations

import threading

import pytest

from agentkeep.errors import (
    DuplicateProviderError,
    InvalidConfigError,
    ProviderError,
    UnknownProviderError,
)
from agentkeep.providers import Provider, Providers, RespondingModel, ScriptedModel


def test_an_added_provider_is_resolved_with_its_kind() -> None:
    providers = Providers()
    model = RespondingModel()
    providers.add("local", model, kind="gym")
    assert providers.get("local") is model
    assert providers.resolve("local", "gym-1") is model
    assert providers.kind_of("local") == "gym"
    assert providers.ids() == ("local",)
    assert "local" in providers
    assert len(providers) == 1


def test_a_duplicate_id_is_refused_and_keeps_the_first() -> None:
    providers = Providers()
    first = RespondingModel()
    providers.add("local", first, kind="gym")
    with pytest.raises(DuplicateProviderError) as raised:
        providers.add("local", ScriptedModel(), kind="claude")
    assert raised.value.code == "duplicate_provider"
    assert providers.get("local") is first
    assert providers.kind_of("local") == "gym"


@pytest.mark.parametrize("kind", ["openai", "", "Claude"])
def test_an_unknown_kind_is_refused(kind: str) -> None:
    with pytest.raises(InvalidConfigError, match="kind"):
        Providers().add("x", RespondingModel(), kind=kind)  # type: ignore[arg-type]


def test_an_empty_id_or_a_non_provider_is_refused() -> None:
    providers = Providers()
    with pytest.raises(InvalidConfigError):
        providers.add("", RespondingModel(), kind="gym")
    with pytest.raises(InvalidConfigError):
        providers.add("x", 42, kind="gym")  # type: ignore[arg-type]
    assert providers.ids() == ()


def test_unknown_ids() -> None:
    providers = Providers()
    assert providers.get("nope") is None
    assert providers.kind_of("nope") is None
    assert providers.compatibility_key("nope", "m") is None
    with pytest.raises(UnknownProviderError) as raised:
        providers.resolve("nope", None)
    assert raised.value.provider_id == "nope"


def test_remove_frees_the_id() -> None:
    providers = Providers()
    providers.add("local", RespondingModel(), kind="gym")
    assert providers.remove("local") is True
    assert providers.remove("local") is False
    providers.add("local", ScriptedModel(), kind="claude")
    assert providers.kind_of("local") == "claude"


def test_removal_listeners_hear_each_removal_until_unsubscribed() -> None:
    providers = Providers()
    providers.add("local", RespondingModel(), kind="gym")
    heard: list[str] = []
    unsubscribe = providers.on_remove(heard.append)
    assert providers.remove("nope") is False  # nothing removed: nothing told
    assert providers.remove("local") is True
    assert heard == ["local"]
    unsubscribe()
    unsubscribe()  # idempotent
    providers.add("local", RespondingModel(), kind="gym")
    providers.remove("local")
    assert heard == ["local"]


def test_a_factory_is_called_with_the_id_and_model_on_every_resolve() -> None:
    calls: list[tuple[str, str | None]] = []

    def factory(provider_id: str, model: str | None) -> Provider:
        calls.append((provider_id, model))
        return RespondingModel()

    providers = Providers()
    providers.add("f", factory, kind="gym")
    first = providers.resolve("f", "gym-1")
    second = providers.resolve("f", "gym-2")
    assert isinstance(first, RespondingModel)
    assert first is not second
    assert calls == [("f", "gym-1"), ("f", "gym-2")]


def test_a_failing_or_wrong_factory_is_a_provider_error() -> None:
    def broken(provider_id: str, model: str | None) -> Provider:
        raise RuntimeError("no credentials")

    def wrong(provider_id: str, model: str | None) -> Provider:
        return "not a provider"  # type: ignore[return-value]

    providers = Providers()
    providers.add("broken", broken, kind="claude")
    providers.add("wrong", wrong, kind="claude")
    with pytest.raises(ProviderError, match="no credentials"):
        providers.resolve("broken", None)
    with pytest.raises(ProviderError, match="not a provider"):
        providers.resolve("wrong", None)


def test_region_comes_from_the_argument_or_the_provider_attribute() -> None:
    class RegionalModel(RespondingModel):
        region = "eu-west-1"

    providers = Providers()
    providers.add("explicit", RespondingModel(), kind="bedrock", region="us-east-1")
    providers.add("attribute", RegionalModel(), kind="bedrock")
    providers.add("none", RespondingModel(), kind="bedrock")
    assert providers.region_of("explicit") == "us-east-1"
    assert providers.region_of("attribute") == "eu-west-1"
    assert providers.region_of("none") is None
    assert providers.compatibility_key("explicit", "openai/gpt-5") == "bedrock:us-east-1"
    assert providers.compatibility_key("none", "openai/gpt-5") == "bedrock-provider:none"
    assert providers.compatibility_key("none", "anthropic/opus") == "bedrock"


def test_concurrent_adds_of_one_id_admit_exactly_one() -> None:
    providers = Providers()
    start = threading.Barrier(8)
    outcomes: list[str] = []
    lock = threading.Lock()

    def add(index: int) -> None:
        start.wait()
        try:
            providers.add("same", RespondingModel(seed=index), kind="gym")
            result = "added"
        except DuplicateProviderError:
            result = "duplicate"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=add, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["added"] + ["duplicate"] * 7
