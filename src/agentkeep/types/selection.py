"""What inference runs on: provider, model, effort, service tier, permission mode and profile.

A queued message may carry :class:`MessageOptions`; consuming it folds them into the agent's
durable :class:`Settings` (:func:`apply_options`), and a request runs on a :class:`Selection`.

The profile is different from the other options: every message selects one (omitting it
selects None), so it never carries over from one message to the next. It is opaque control
data: durable, readable by hooks, never part of a :class:`Selection` (never sent to a provider).
"""

from __future__ import annotations

from typing import Literal, TypeAlias

from agentkeep.types.content import Value

# -- selection values ---------------------------------------------------------------------

ReasoningEffort: TypeAlias = Literal["off", "minimal", "low", "medium", "high", "xhigh", "max"]
ServiceTier: TypeAlias = Literal["priority"]
REASONING_EFFORTS: tuple[ReasoningEffort, ...] = (
    "off",
    "minimal",
    "low",
    "medium",
    "high",
    "xhigh",
    "max",
)

PermissionMode: TypeAlias = Literal["read_only", "workspace_write", "auto", "full_access"]
PERMISSION_MODES: tuple[PermissionMode, ...] = (
    "read_only",
    "workspace_write",
    "auto",
    "full_access",
)


class Selection(Value, frozen=True):
    """What one request runs on: serializable values only."""

    model: str | None = None
    effort: ReasoningEffort | None = None
    service_tier: ServiceTier | None = None


class MessageOptions(Value, frozen=True):
    """Per-message settings; they take effect when the message is consumed and stay, except
    ``profile``, which each message selects for itself (None: the null profile)."""

    provider: str | None = None
    model: str | None = None
    effort: ReasoningEffort | None = None
    service_tier: ServiceTier | None = None
    permission_mode: PermissionMode | None = None
    profile: str | None = None


class Settings(Value, frozen=True):
    """The effective inference selection, updated by consumed messages. ``profile`` is the
    one the last consumed message selected (None until a message selects one)."""

    provider: str | None = None
    model: str | None = None
    effort: ReasoningEffort | None = None
    service_tier: ServiceTier | None = None
    permission_mode: PermissionMode = "auto"
    profile: str | None = None


def apply_options(settings: Settings, options: MessageOptions) -> Settings:
    """The selection after a message with ``options`` is consumed: per-message settings take
    effect when consumed and stay effective; the profile is the message's own (omission
    selects None)."""
    return Settings(
        provider=options.provider if options.provider is not None else settings.provider,
        model=options.model if options.model is not None else settings.model,
        effort=options.effort if options.effort is not None else settings.effort,
        service_tier=(
            options.service_tier if options.service_tier is not None else settings.service_tier
        ),
        permission_mode=(
            options.permission_mode
            if options.permission_mode is not None
            else settings.permission_mode
        ),
        profile=options.profile,
    )
