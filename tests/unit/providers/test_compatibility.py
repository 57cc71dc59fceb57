"""The compatibility matrix and the reset rule (invariant I22), table-driven."""

from __future__ import annotations

import itertools

import pytest

from agentkeep.providers import Providers, RespondingModel
from agentkeep.providers.compatibility import (
    PROVIDER_KINDS,
    Endpoint,
    ProviderKind,
    compatibility_key,
    compatible,
    model_family,
    needs_reset,
)

MODEL_OF_FAMILY = {"claude": "anthropic/opus", "codex": "openai/gpt-5", "grok": "xai/grok-4"}

# The spec's table, row by row: from-kind → to-kind → families carried across.
SPEC_TABLE: dict[tuple[str, str], set[str]] = {
    ("bedrock", "bedrock"): {"claude", "codex"},
    ("claude", "claude"): {"claude"},
    ("codex", "codex"): {"codex"},
    ("grok", "grok"): {"grok"},
    ("gym", "gym"): {"claude", "codex", "grok"},
}

ALL_CASES = [
    (left, right, family, family in SPEC_TABLE.get((left, right), set()))
    for left, right in itertools.product(PROVIDER_KINDS, PROVIDER_KINDS)
    for family in MODEL_OF_FAMILY
]


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("anthropic/claude-opus-4", "claude"),
        ("openai/gpt-5", "codex"),
        ("xai/grok-4", "grok"),
        ("gym-1", None),
        ("claude-opus", None),  # no vendor prefix: no family
        ("", None),
        (None, None),
    ],
)
def test_model_family_is_read_from_the_vendor_prefix(model: str | None, family: str | None) -> None:
    assert model_family(model) == family


@pytest.mark.parametrize(("left", "right", "family", "expected"), ALL_CASES)
def test_every_cell_of_the_matrix(left: str, right: str, family: str, expected: bool) -> None:
    model = MODEL_OF_FAMILY[family]
    before = Endpoint(provider_id="p", kind=left, model=model, region="us-east-1")  # type: ignore[arg-type]
    after = Endpoint(provider_id="p", kind=right, model=model, region="us-east-1")  # type: ignore[arg-type]
    assert compatible(before, after) is expected


@pytest.mark.parametrize("kind", PROVIDER_KINDS)
def test_models_without_a_family_are_compatible_with_nothing(kind: ProviderKind) -> None:
    endpoint = Endpoint(provider_id="p", kind=kind, model="gym-1")
    assert not compatible(endpoint, endpoint)


def test_different_families_are_never_compatible() -> None:
    before = Endpoint(provider_id="p", kind="gym", model="anthropic/opus")
    after = Endpoint(provider_id="p", kind="gym", model="openai/gpt-5")
    assert not compatible(before, after)


@pytest.mark.parametrize(
    ("left", "right", "expected"),
    [
        (("a", "us-east-1"), ("b", "us-east-1"), True),  # same region, other provider instance
        (("a", "us-east-1"), ("a", "eu-west-1"), False),  # region changed
        (("a", None), ("a", "us-east-1"), True),  # region unknown: same provider id decides
        (("a", None), ("b", "us-east-1"), False),
        (("a", None), ("b", None), False),
    ],
)
def test_bedrock_codex_is_bound_to_a_region_or_else_to_the_provider(
    left: tuple[str, str | None], right: tuple[str, str | None], expected: bool
) -> None:
    before = Endpoint(provider_id=left[0], kind="bedrock", model="openai/gpt-5", region=left[1])
    after = Endpoint(provider_id=right[0], kind="bedrock", model="openai/gpt-5", region=right[1])
    assert compatible(before, after) is expected


def test_bedrock_claude_ignores_regions() -> None:
    before = Endpoint(provider_id="a", kind="bedrock", model="anthropic/opus", region="us-east-1")
    after = Endpoint(provider_id="b", kind="bedrock", model="anthropic/opus", region="eu-west-1")
    assert compatible(before, after)


@pytest.mark.parametrize(
    ("provider_id", "kind", "model", "region", "key"),
    [
        ("c", "claude", "anthropic/opus", None, "claude"),
        ("g", "gym", "gym-1", None, "gym"),
        ("b", "bedrock", "anthropic/opus", "us-east-1", "bedrock"),
        ("b", "bedrock", "openai/gpt-5", "us-east-1", "bedrock:us-east-1"),
        ("b", "bedrock", "openai/gpt-5", None, "bedrock-provider:b"),
    ],
)
def test_compatibility_key(
    provider_id: str, kind: ProviderKind, model: str, region: str | None, key: str
) -> None:
    assert compatibility_key(provider_id, kind, model, region) == key


def _registry() -> Providers:
    providers = Providers()
    model = RespondingModel()
    providers.add("gym", model, kind="gym")
    providers.add("gym2", model, kind="gym")
    providers.add("claude", model, kind="claude")
    providers.add("claude2", model, kind="claude")
    providers.add("codex", model, kind="codex")
    providers.add("bedrock-us", model, kind="bedrock", region="us-east-1")
    providers.add("bedrock-eu", model, kind="bedrock", region="eu-west-1")
    providers.add("bedrock-x", model, kind="bedrock")
    return providers


OPUS, SONNET, GPT = "anthropic/opus", "anthropic/sonnet", "openai/gpt-5"

# (previous provider, previous model, provider, model, reset?, why)
RESET_CASES = [
    ("gym", OPUS, "gym", OPUS, False, "nothing changed"),
    ("gym", OPUS, "gym", SONNET, False, "compatible model change keeps history"),
    ("gym", OPUS, "gym2", OPUS, False, "provider-only change within a kind keeps history"),
    ("claude", OPUS, "claude2", SONNET, False, "same kind and family"),
    ("gym", OPUS, "gym", GPT, True, "family changed"),
    ("gym", OPUS, "claude", OPUS, True, "kind changed"),
    ("claude", OPUS, "codex", GPT, True, "kind and family changed"),
    ("gym", "gym-1", "gym", "gym-2", True, "models without a family are incompatible"),
    ("gym", "gym-1", "gym", "gym-1", True, "no family even when unchanged"),
    ("unknown", OPUS, "gym", OPUS, True, "previous provider unknown"),
    ("gym", OPUS, "unknown", OPUS, True, "new provider unknown"),
    (None, OPUS, "gym", OPUS, True, "previous provider unset"),
    ("bedrock-us", GPT, "bedrock-us", GPT, False, "same bedrock region"),
    ("bedrock-us", GPT, "bedrock-eu", GPT, True, "bedrock region changed for codex"),
    ("bedrock-us", OPUS, "bedrock-eu", OPUS, False, "claude on bedrock is not region-bound"),
    ("bedrock-x", GPT, "bedrock-us", GPT, True, "unknown region: provider id must match"),
    ("gym", None, "gym", OPUS, True, "first model on a history erases it"),
    ("gym", OPUS, "gym", None, True, "model value changed (to none)"),
    ("gym", None, "gym", None, False, "no models at all"),
    ("gym", None, "claude", None, False, "provider-only change without models keeps history"),
    (None, None, "gym", None, False, "first provider, no model"),
]


@pytest.mark.parametrize(
    ("previous_provider", "previous_model", "provider", "model", "reset", "why"), RESET_CASES
)
def test_reset_rule(
    previous_provider: str | None,
    previous_model: str | None,
    provider: str | None,
    model: str | None,
    reset: bool,
    why: str,
) -> None:
    registry = _registry()
    assert needs_reset(previous_provider, previous_model, provider, model, registry) is reset, why
