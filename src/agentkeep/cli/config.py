"""Configuration the CLI reads: the providers registry and agent creation configs.

The deterministic local model is always registered (id ``local``, kind ``gym``, model
``gym-1``), so a fresh machine needs no configuration. An optional ``providers.toml`` in the
state directory registers more::

    [defaults]                  # optional: the provider and model new agents start on
    provider = "claude"
    model = "anthropic/claude-sonnet-4-6"

    [providers.claude]
    kind = "claude"             # claude | codex | grok | bedrock | gym
    class = "anthropic"         # anthropic | openai | openai-compatible | responding
    model = "anthropic/claude-sonnet-4-6"
    api_key_env = "ANTHROPIC_API_KEY"   # the name of the variable, never the key itself
    base_url = "https://..."            # optional

Vendor adapters are imported only when a provider is first used, so a missing SDK or adapter
affects only the commands that select that provider, with a message saying what to install.
"""

from __future__ import annotations

import importlib
import json
import os
import threading
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import msgspec

from agentkeep.cli.model import DEMO_MODEL, DEMO_PROVIDER, DemoModel
from agentkeep.cli.output import EXIT_BAD_INPUT, CliError
from agentkeep.config import AgentConfig
from agentkeep.errors import AgentkeepError
from agentkeep.providers.compatibility import PROVIDER_KINDS, ProviderKind
from agentkeep.providers.protocol import Provider, ServesModels
from agentkeep.providers.registry import Providers
from agentkeep.providers.responding import RespondingModel

PROVIDERS_FILE = "providers.toml"
LOCAL_PROVIDER = "local"
LOCAL_MODEL = "gym-1"
# The demo model pauses before each stream event so people can watch answers stream in.
DEMO_LATENCY_SECONDS = 0.02

# class name in providers.toml -> (module, attribute, the optional extra that brings its SDK)
PROVIDER_CLASSES: dict[str, tuple[str, str, str | None]] = {
    "anthropic": ("agentkeep.providers.anthropic", "AnthropicProvider", "anthropic"),
    "openai": ("agentkeep.providers.openai_responses", "OpenAIProvider", "openai"),
    "openai-compatible": ("agentkeep.providers.openai_chat", "OpenAICompatibleProvider", "openai"),
    "responding": ("agentkeep.providers.responding", "RespondingModel", None),
}
_ENTRY_KEYS = {"kind", "class", "model", "base_url", "api_key_env"}


@dataclass(frozen=True, kw_only=True)
class ProviderEntry:
    """One ``[providers.<id>]`` table, validated."""

    id: str
    kind: ProviderKind
    class_name: str
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None


@dataclass(frozen=True, kw_only=True)
class ProviderConfig:
    """The registry the CLI runs agents with, and the defaults for new agents."""

    providers: Providers
    default_provider: str
    default_model: str | None
    entries: dict[str, ProviderEntry]
    builders: dict[str, _LazyProvider]


def _bad_file(path: Path, problem: str) -> CliError:
    return CliError(
        f"{path} is not a valid providers file: {problem}",
        code="invalid_providers_file",
        hint=f"Fix {path} (see `agentkeep --help`), or move it away to use the local model.",
        exit_code=EXIT_BAD_INPUT,
    )


def _string(path: Path, table: dict[str, Any], key: str, where: str) -> str | None:
    value = table.get(key)
    if value is not None and (not isinstance(value, str) or not value):
        raise _bad_file(path, f"{where}.{key} must be a non-empty string")
    return value


def _parse_entry(path: Path, provider_id: str, table: Any) -> ProviderEntry:
    where = f"[providers.{provider_id}]"
    if not isinstance(table, dict):
        raise _bad_file(path, f"{where} must be a table")
    unknown = sorted(set(table) - _ENTRY_KEYS)
    if unknown:
        raise _bad_file(path, f"{where} has unknown keys: {', '.join(unknown)}")
    kind = table.get("kind")
    if kind not in PROVIDER_KINDS:
        raise _bad_file(path, f"{where}.kind must be one of {', '.join(PROVIDER_KINDS)}")
    class_name = table.get("class", "responding" if kind == "gym" else None)
    if class_name not in PROVIDER_CLASSES:
        raise _bad_file(path, f"{where}.class must be one of {', '.join(PROVIDER_CLASSES)}")
    entry = ProviderEntry(
        id=provider_id,
        kind=cast(ProviderKind, kind),
        class_name=cast(str, class_name),
        model=_string(path, table, "model", where),
        base_url=_string(path, table, "base_url", where),
        api_key_env=_string(path, table, "api_key_env", where),
    )
    if entry.class_name == "openai-compatible" and (entry.base_url is None or entry.model is None):
        raise _bad_file(path, f"{where}: class openai-compatible needs base_url and model")
    return entry


def build_provider(entry: ProviderEntry) -> Provider:
    """Import the adapter named by ``entry.class_name`` and construct it.

    Raises:
        CliError: The adapter module or class is missing, its SDK is not installed, or the
            adapter refused its configuration.
    """
    module_name, attribute, extra = PROVIDER_CLASSES[entry.class_name]
    try:
        module = importlib.import_module(module_name)
        factory = getattr(module, attribute)
    except (ImportError, AttributeError) as error:
        install = f" Install it with `pip install agentkeep[{extra}]`." if extra else ""
        raise CliError(
            f'Provider "{entry.id}" needs {module_name}.{attribute}, which is not available: '
            f"{error}",
            code="provider_unavailable",
            hint=f"Upgrade agentkeep, or remove [providers.{entry.id}] from providers.toml."
            + install,
        ) from error
    if entry.class_name == "responding":
        # A local model serves exactly its configured name (gym-1 when none is given).
        return cast(Provider, factory(models=(entry.model or LOCAL_MODEL,)))
    options: dict[str, Any] = {}
    if entry.model is not None:
        options["model"] = entry.model
    if entry.base_url is not None:
        options["base_url"] = entry.base_url
    if entry.api_key_env is not None:
        key = os.environ.get(entry.api_key_env)
        if not key:
            raise CliError(
                f'Provider "{entry.id}" reads its key from ${entry.api_key_env}, which is unset.',
                code="missing_api_key",
                hint=f"export {entry.api_key_env}=... and run the command again.",
            )
        options["api_key"] = key
    try:
        return cast(Provider, factory(**options))
    except AgentkeepError as error:
        raise CliError(
            f'Provider "{entry.id}" could not start: {error}',
            code=error.code,
            hint="Check its table in providers.toml.",
        ) from error


class _LazyProvider:
    """A registry factory that builds the adapter on first use, then reuses it."""

    def __init__(self, entry: ProviderEntry) -> None:
        self._entry = entry
        self._lock = threading.Lock()
        self._built: Provider | None = None

    def __call__(self, provider_id: str, model: str | None) -> Provider:
        with self._lock:
            if self._built is None:
                self._built = build_provider(self._entry)
            return self._built

    # ServesModels: the adapter decides (built on the first question, as on first use).
    @property
    def served_models(self) -> str:
        built: object = self._built
        if isinstance(built, ServesModels):
            return built.served_models
        return f"the models of [providers.{self._entry.id}]"

    def serves(self, model: str) -> bool:
        built: object = self(self._entry.id, model)
        return not isinstance(built, ServesModels) or built.serves(model)


def load_providers(home: Path) -> ProviderConfig:
    """The local model, the demo model, and whatever ``<home>/providers.toml`` registers.

    Raises:
        CliError: The file is not valid TOML or does not follow the format above.
    """
    providers = Providers()
    providers.add(LOCAL_PROVIDER, RespondingModel(), kind="gym")
    providers.add(DEMO_PROVIDER, DemoModel(latency_seconds=DEMO_LATENCY_SECONDS), kind="gym")
    path = home / PROVIDERS_FILE
    entries: dict[str, ProviderEntry] = {}
    builders: dict[str, _LazyProvider] = {}
    default_provider: str = LOCAL_PROVIDER
    default_model: str | None = LOCAL_MODEL
    if path.is_file():
        try:
            document = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
            raise _bad_file(path, str(error)) from error
        unknown = sorted(set(document) - {"providers", "defaults"})
        if unknown:
            raise _bad_file(path, f"unknown top-level keys: {', '.join(unknown)}")
        tables = document.get("providers", {})
        if not isinstance(tables, dict):
            raise _bad_file(path, "[providers] must be a table of tables")
        for provider_id, table in tables.items():
            if provider_id in (LOCAL_PROVIDER, DEMO_PROVIDER):
                raise _bad_file(path, f'"{provider_id}" is built in; choose another id')
            entry = _parse_entry(path, provider_id, table)
            entries[provider_id] = entry
            builders[provider_id] = _LazyProvider(entry)
            providers.add(provider_id, builders[provider_id], kind=entry.kind)
        defaults = document.get("defaults", {})
        if not isinstance(defaults, dict):
            raise _bad_file(path, "[defaults] must be a table")
        default_provider = _string(path, defaults, "provider", "defaults") or default_provider
        if default_provider not in providers:
            raise _bad_file(path, f'defaults.provider "{default_provider}" is not registered')
        chosen = entries.get(default_provider)
        fallback = chosen.model if chosen is not None else LOCAL_MODEL
        if default_provider == DEMO_PROVIDER:
            fallback = DEMO_MODEL
        default_model = _string(path, defaults, "model", "defaults") or fallback
    return ProviderConfig(
        providers=providers,
        default_provider=default_provider,
        default_model=default_model,
        entries=entries,
        builders=builders,
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
        builder(provider_id, None)  # builds it now: a missing SDK or key fails here, clearly


def load_agent_config(
    path: Path | None, *, title: str | None, metadata: dict[str, Any]
) -> AgentConfig:
    """An agent config from ``--config FILE.json`` and flags (flags win for metadata).

    Raises:
        CliError: The file is missing, not JSON, or not an agent config.
    """
    base: dict[str, Any] = {}
    if path is not None:
        try:
            base = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as error:
            raise CliError(
                f"Config file {path} does not exist.",
                code="config_file_missing",
                hint="Pass the path of a JSON agent config.",
                exit_code=EXIT_BAD_INPUT,
            ) from error
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise CliError(
                f"Config file {path} is not valid JSON: {error}",
                code="invalid_config_file",
                hint='Fix the file; it looks like {"metadata": {"title": "..."}}.',
                exit_code=EXIT_BAD_INPUT,
            ) from error
        if not isinstance(base, dict):
            raise CliError(
                f"Config file {path} must hold a JSON object, not {type(base).__name__}.",
                code="invalid_config_file",
                hint='It looks like {"environment": {...}, "features": {}, "metadata": {}}.',
                exit_code=EXIT_BAD_INPUT,
            )
    unknown = sorted(set(base) - {"environment", "features", "metadata"})
    if unknown:
        raise CliError(
            f"Config file {path} has unknown keys: {', '.join(unknown)}.",
            code="invalid_config_file",
            hint="Allowed keys: environment (complete or absent), features, metadata.",
            exit_code=EXIT_BAD_INPUT,
        )
    source = f"Config file {path}" if path is not None else "The agent config"
    if not isinstance(base.get("metadata") or {}, dict):
        raise CliError(
            f"{source} is not a valid agent config: metadata must be a JSON object.",
            code="invalid_config",
            hint='Write metadata as {"title": "..."}.',
            exit_code=EXIT_BAD_INPUT,
        )
    merged_metadata = dict(base.get("metadata") or {})
    merged_metadata.update(metadata)
    if title is not None:
        merged_metadata["title"] = title
    base = {**base, "metadata": merged_metadata}
    try:
        config = msgspec.convert(base, type=AgentConfig)
        return config.validated()
    except (msgspec.ValidationError, AgentkeepError) as error:
        raise CliError(
            f"{source} is not a valid agent config: {error}",
            code="invalid_config",
            hint="Allowed keys: environment (complete or absent), features, metadata.",
            exit_code=EXIT_BAD_INPUT,
        ) from error
