"""Configuration the CLI reads: the providers registry and agent creation configs.

Two local models are always registered, so a fresh machine needs no configuration: ``demo``
(model ``demo-1``, the default: it really answers arithmetic and word counts with the demo
tools) and ``local`` (model ``gym-1``, the deterministic test model that answers
``answer-<n>``). An optional ``providers.toml`` in the state directory registers more::

    [defaults]                  # optional: the provider and model new agents start on
    provider = "claude"
    model = "anthropic/claude-sonnet-4-6"

    [providers.claude]
    kind = "claude"             # claude | codex | grok | bedrock | gym
    class = "anthropic"         # anthropic | openai | openai-compatible | responding | demo
    model = "anthropic/claude-sonnet-4-6"   # its default model (used by --provider alone)
    api_key_env = "ANTHROPIC_API_KEY"   # the name of the variable, never the key itself
    base_url = "https://..."            # optional
    max_retries = 3                     # optional, vendor classes: retries of a failed request
    demo_tools = true                   # optional: offer the demo tools to its agents

    [providers.slow]
    kind = "gym"
    class = "demo"              # a local class: responding or demo
    latency_seconds = 0.5       # optional, local classes: a pause before each stream event

Agents on a local model always get the demo tools; agents on a vendor get them only when
their provider's table says ``demo_tools = true``.

Vendor adapters are imported only when a provider is first used, so a missing SDK or adapter
affects only the commands that select that provider, with a message saying what to install.

This module assembles the registry (:func:`load_providers`) and checks what a command asks of
it; the pieces live next to it and are re-exported here:

- :mod:`~agentkeep.cli.providers_toml`: the file's tables, validated into ``ProviderEntry``;
- :mod:`~agentkeep.cli.provider_adapters`: building an entry's adapter (``build_provider``),
  lazily on first use;
- :mod:`~agentkeep.cli.agent_config_file`: ``load_agent_config``, the ``--config FILE.json``
  of agent creation.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from pathlib import Path

from agentkeep.cli.agent_config_file import load_agent_config
from agentkeep.cli.output import EXIT_BAD_INPUT, CliError
from agentkeep.cli.provider_adapters import LazyProvider, build_provider
from agentkeep.cli.providers_toml import (
    LOCAL_CLASSES,
    LOCAL_MODEL,
    LOCAL_PROVIDER,
    PROVIDER_CLASSES,
    PROVIDERS_FILE,
    ProviderEntry,
    bad_providers_file,
    optional_string,
    parse_entry,
)
from agentkeep.providers.catalog import Providers
from agentkeep.providers.demo import DEMO_MODEL, DEMO_PROVIDER, DemoModel
from agentkeep.providers.responding import RespondingModel
from agentkeep.types import MessageOptions

# The demo model pauses before each stream event so people can watch answers stream in.
DEMO_LATENCY_SECONDS = 0.02

__all__ = [
    "DEMO_LATENCY_SECONDS",
    "LOCAL_CLASSES",
    "LOCAL_MODEL",
    "LOCAL_PROVIDER",
    "PROVIDERS_FILE",
    "PROVIDER_CLASSES",
    "ProviderConfig",
    "ProviderEntry",
    "build_provider",
    "check_provider",
    "load_agent_config",
    "load_providers",
    "message_options",
]


@dataclass(frozen=True, kw_only=True)
class ProviderConfig:
    """The registry the CLI runs agents with, and the defaults for new agents."""

    providers: Providers
    default_provider: str
    default_model: str | None
    entries: dict[str, ProviderEntry]
    builders: dict[str, LazyProvider]

    def model_for(self, provider_id: str) -> str | None:
        """The configured default model of ``provider_id`` (None if it has none)."""
        if provider_id == LOCAL_PROVIDER:
            return LOCAL_MODEL
        if provider_id == DEMO_PROVIDER:
            return DEMO_MODEL
        entry = self.entries.get(provider_id)
        return None if entry is None else entry.default_model

    def offers_demo_tools(self, provider_id: str | None) -> bool:
        """Whether agents on ``provider_id`` (None: the default provider) get the demo
        tools: always on a built-in or local model, on a vendor only with ``demo_tools``."""
        chosen = provider_id or self.default_provider
        entry = self.entries.get(chosen)
        if entry is None:
            return chosen in (LOCAL_PROVIDER, DEMO_PROVIDER)
        return entry.local or entry.demo_tools


def load_providers(home: Path) -> ProviderConfig:
    """The demo model (the default), the local test model, and whatever
    ``<home>/providers.toml`` registers.

    Raises:
        CliError: The file is not valid TOML or does not follow the format above.
    """
    providers = Providers()
    providers.add(LOCAL_PROVIDER, RespondingModel(), kind="gym")
    providers.add(DEMO_PROVIDER, DemoModel(latency_seconds=DEMO_LATENCY_SECONDS), kind="gym")
    path = home / PROVIDERS_FILE
    entries: dict[str, ProviderEntry] = {}
    builders: dict[str, LazyProvider] = {}
    default_provider: str = DEMO_PROVIDER
    default_model: str | None = None
    if path.is_file():
        try:
            document = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
            raise bad_providers_file(path, str(error)) from error
        unknown = sorted(set(document) - {"providers", "defaults"})
        if unknown:
            raise bad_providers_file(path, f"unknown top-level keys: {', '.join(unknown)}")
        tables = document.get("providers", {})
        if not isinstance(tables, dict):
            raise bad_providers_file(path, "[providers] must be a table of tables")
        for provider_id, table in tables.items():
            if provider_id in (LOCAL_PROVIDER, DEMO_PROVIDER):
                raise bad_providers_file(path, f'"{provider_id}" is built in; choose another id')
            entry = parse_entry(path, provider_id, table)
            entries[provider_id] = entry
            builders[provider_id] = LazyProvider(entry)
            providers.add(provider_id, builders[provider_id], kind=entry.kind)
        defaults = document.get("defaults", {})
        if not isinstance(defaults, dict):
            raise bad_providers_file(path, "[defaults] must be a table")
        unknown_defaults = sorted(set(defaults) - {"provider", "model"})
        if unknown_defaults:
            raise bad_providers_file(
                path, f"[defaults] has unknown keys: {', '.join(unknown_defaults)}"
            )
        default_provider = (
            optional_string(path, defaults, "provider", "defaults") or default_provider
        )
        if default_provider not in providers:
            raise bad_providers_file(
                path, f'defaults.provider "{default_provider}" is not registered'
            )
        default_model = optional_string(path, defaults, "model", "defaults")
    config = ProviderConfig(
        providers=providers,
        default_provider=default_provider,
        default_model=None,
        entries=entries,
        builders=builders,
    )
    # Without [defaults].model, new agents start on their provider's own default model.
    return dataclasses.replace(
        config, default_model=default_model or config.model_for(default_provider)
    )


def check_provider(config: ProviderConfig, provider_id: str | None) -> None:
    """Fail early, with a clear message, if ``provider_id`` is unknown or cannot start."""
    if provider_id is None:
        return
    if provider_id not in config.providers:
        known = ", ".join(config.providers.ids())
        raise CliError(
            f'Provider "{provider_id}" is not registered (known: {known}).',
            code="unknown_provider",
            hint="Register it in providers.toml in the state directory.",
            exit_code=EXIT_BAD_INPUT,
        )
    builder = config.builders.get(provider_id)
    if builder is not None:
        builder.build()  # builds it now: a missing SDK or key fails here, clearly


def message_options(
    config: ProviderConfig, provider_id: str | None, model: str | None
) -> MessageOptions:
    """The options of a message sent with ``--provider`` / ``--model``.

    ``--provider X`` alone switches to X's configured default model: the agent's current
    model belongs to its current provider and means nothing to X (``gym-1`` sent to a
    vendor). ``--model`` alone keeps the provider.

    Raises:
        CliError: The provider is unknown or cannot start, or it has no default model and
            no ``--model`` was given.
    """
    check_provider(config, provider_id)
    if provider_id is not None and model is None:
        model = config.model_for(provider_id)
        if model is None:
            raise CliError(
                f'Provider "{provider_id}" has no default model, and no --model was given.',
                code="no_default_model",
                hint=f"Pass --model, or add model = ... to [providers.{provider_id}] in "
                "providers.toml.",
                exit_code=EXIT_BAD_INPUT,
            )
    return MessageOptions(provider=provider_id, model=model)
