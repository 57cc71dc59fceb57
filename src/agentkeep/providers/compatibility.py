"""Which conversations survive a provider or model switch, as pure functions.

A history carries vendor-signed payloads (reasoning signatures, encrypted reasoning, server
tool results) that only the vendor family that produced them can read back. The matrix below
says which provider kinds may continue a history written under another kind, and for which
model families; :func:`needs_reset` applies the reset rule (invariant I22) on top of it.

Nothing here reads global state: the catalog is passed in (anything with ``kind_of``,
``region_of`` and ``compatibility_key``), so the rule is table-testable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, Protocol, TypeAlias

import msgspec

ProviderKind: TypeAlias = Literal["claude", "codex", "grok", "bedrock", "gym"]
ModelFamily: TypeAlias = Literal["claude", "codex", "grok"]

PROVIDER_KINDS: tuple[ProviderKind, ...] = ("claude", "codex", "grok", "bedrock", "gym")

# Family by model prefix; anything else has no family and is compatible with nothing.
_FAMILY_PREFIXES: tuple[tuple[str, ModelFamily], ...] = (
    ("anthropic/", "claude"),
    ("openai/", "codex"),
    ("xai/", "grok"),
)

# matrix[from_kind][to_kind] = the model families a history may carry across that switch.
# Only the diagonal is populated: a history never moves between provider kinds.
COMPATIBILITY_MATRIX: Mapping[ProviderKind, Mapping[ProviderKind, frozenset[ModelFamily]]] = {
    "bedrock": {"bedrock": frozenset({"claude", "codex"})},
    "claude": {"claude": frozenset({"claude"})},
    "codex": {"codex": frozenset({"codex"})},
    "grok": {"grok": frozenset({"grok"})},
    "gym": {"gym": frozenset({"claude", "codex", "grok"})},
}


def model_family(model: str | None) -> ModelFamily | None:
    """The vendor family of a model id (``anthropic/…`` → ``claude``), or None if unknown."""
    if model is None:
        return None
    for prefix, family in _FAMILY_PREFIXES:
        if model.startswith(prefix):
            return family
    return None


class Endpoint(msgspec.Struct, frozen=True, kw_only=True):
    """One side of a switch: which provider (id and kind) runs which model, and where."""

    provider_id: str
    kind: ProviderKind
    model: str
    region: str | None = None  # only meaningful for bedrock


def _region_bound(endpoint: Endpoint) -> bool:
    # OpenAI models on Bedrock encrypt reasoning per region, so their histories are bound to
    # a region (or, when the region is unknown, to the one provider instance).
    return endpoint.kind == "bedrock" and model_family(endpoint.model) == "codex"


def compatible(left: Endpoint, right: Endpoint) -> bool:
    """Whether a history written by ``left`` can be continued by ``right``.

    Families must be defined and equal and listed in the matrix for ``left.kind → right.kind``;
    for bedrock running codex models the regions must match when both are known, otherwise
    the provider ids must.
    """
    left_family = model_family(left.model)
    right_family = model_family(right.model)
    if left_family is None or left_family != right_family:
        return False
    allowed = COMPATIBILITY_MATRIX.get(left.kind, {}).get(right.kind, frozenset())
    if left_family not in allowed:
        return False
    if _region_bound(left) or _region_bound(right):
        if left.region is not None and right.region is not None:
            return left.region == right.region
        return left.provider_id == right.provider_id
    return True


def compatibility_key(
    provider_id: str, kind: ProviderKind, model: str | None, region: str | None
) -> str:
    """A string that is equal for two endpoints whose contexts are interchangeable.

    The kind itself, except for bedrock running codex models: ``bedrock:<region>`` when the
    region is known, else ``bedrock-provider:<id>``.
    """
    if kind == "bedrock" and model_family(model) == "codex":
        if region is not None:
            return f"bedrock:{region}"
        return f"bedrock-provider:{provider_id}"
    return kind


class ProviderLookup(Protocol):
    """What :func:`needs_reset` needs from a catalog (``Providers`` satisfies it)."""

    def kind_of(self, provider_id: str) -> ProviderKind | None:
        """The kind ``provider_id`` was registered with, or None if it is not registered."""
        ...

    def region_of(self, provider_id: str) -> str | None:
        """The region ``provider_id`` was registered with (bedrock), or None."""
        ...

    def compatibility_key(self, provider_id: str, model: str | None) -> str | None:
        """The context compatibility key of ``(provider_id, model)``, or None if unregistered."""
        ...


def needs_reset(
    previous_provider: str | None,
    previous_model: str | None,
    provider: str | None,
    model: str | None,
    catalog: ProviderLookup,
) -> bool:
    """The reset rule (invariant I22): must the history be erased for this switch?

    When both models are set, reset if either provider kind is unknown, the kinds differ, a
    compatibility key is missing, or the endpoints are not :func:`compatible`. Otherwise
    reset exactly when the model value changed: setting a first model on a history erases
    it, while a provider-only change keeps it.
    """
    if previous_model is None or model is None:
        return previous_model != model
    previous_kind = catalog.kind_of(previous_provider) if previous_provider else None
    kind = catalog.kind_of(provider) if provider else None
    if previous_provider is None or provider is None or previous_kind is None or kind is None:
        return True
    if previous_kind != kind:
        return True
    previous_key = catalog.compatibility_key(previous_provider, previous_model)
    key = catalog.compatibility_key(provider, model)
    if previous_key is None or key is None:
        return True
    before = Endpoint(
        provider_id=previous_provider,
        kind=previous_kind,
        model=previous_model,
        region=catalog.region_of(previous_provider),
    )
    after = Endpoint(
        provider_id=provider, kind=kind, model=model, region=catalog.region_of(provider)
    )
    return not compatible(before, after)
