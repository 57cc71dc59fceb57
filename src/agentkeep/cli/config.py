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
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import os
import threading
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import msgspec

from agentkeep.cli.output import EXIT_BAD_INPUT, CliError
from agentkeep.config import AgentConfig
from agentkeep.errors import AgentkeepError
from agentkeep.model import MessageOptions
from agentkeep.providers.compatibility import PROVIDER_KINDS, ProviderKind
from agentkeep.providers.demo import DEMO_MODEL, DEMO_PROVIDER, DemoModel
from agentkeep.providers.protocol import Provider, ServesModels
from agentkeep.providers.registry import Providers
from agentkeep.providers.responding import RespondingModel
from agentkeep.providers.retry import MAX_RETRIES_CAP, RetryPolicy

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
    "demo": ("agentkeep.providers.demo", "DemoModel", None),
}
# The classes that run in this process (no network, no key): they get the demo tools.
LOCAL_CLASSES = frozenset({"responding", "demo"})
# A local class's own model, the default when its table names none.
_LOCAL_CLASS_MODELS = {"responding": LOCAL_MODEL, "demo": DEMO_MODEL}
_ENTRY_KEYS = {
    "kind",
    "class",
    "model",
    "base_url",
    "api_key_env",
    "latency_seconds",
    "max_retries",
    "demo_tools",
}


@dataclass(frozen=True, kw_only=True)
class ProviderEntry:
    """One ``[providers.<id>]`` table, validated."""

    id: str
    kind: ProviderKind
    class_name: str
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    latency_seconds: float | None = None
    max_retries: int | None = None
    demo_tools: bool = False

    @property
    def local(self) -> bool:
        """Whether it runs in this process (a local model class)."""
        return self.class_name in LOCAL_CLASSES

    @property
    def default_model(self) -> str | None:
        """The model its agents use unless told otherwise: its ``model``, else a local
        class's own model, else None (a vendor table without ``model``)."""
        return self.model or _LOCAL_CLASS_MODELS.get(self.class_name)


@dataclass(frozen=True, kw_only=True)
class ProviderConfig:
    """The registry the CLI runs agents with, and the defaults for new agents."""

    providers: Providers
    default_provider: str
    default_model: str | None
    entries: dict[str, ProviderEntry]
    builders: dict[str, _LazyProvider]

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
        latency_seconds=_latency(path, table, where),
        max_retries=_retries(path, table, where),
        demo_tools=_flag(path, table, "demo_tools", where),
    )
    if entry.class_name == "openai-compatible" and (entry.base_url is None or entry.model is None):
        raise _bad_file(path, f"{where}: class openai-compatible needs base_url and model")
    if entry.local and (entry.max_retries is not None or entry.api_key_env or entry.base_url):
        raise _bad_file(
            path, f"{where}: max_retries, base_url and api_key_env are for vendor classes only"
        )
    if not entry.local and entry.latency_seconds is not None:
        raise _bad_file(path, f"{where}: latency_seconds is for local classes only")
    return entry


def _latency(path: Path, table: dict[str, Any], where: str) -> float | None:
    value = table.get("latency_seconds")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _bad_file(path, f"{where}.latency_seconds must be a number of seconds")
    if not 0 <= value <= 60:
        raise _bad_file(path, f"{where}.latency_seconds must be within 0..60")
    return float(value)


def _retries(path: Path, table: dict[str, Any], where: str) -> int | None:
    value = table.get("max_retries")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad_file(path, f"{where}.max_retries must be a whole number")
    if not 0 <= value <= MAX_RETRIES_CAP:
        raise _bad_file(path, f"{where}.max_retries must be within 0..{MAX_RETRIES_CAP}")
    return value


def _flag(path: Path, table: dict[str, Any], key: str, where: str) -> bool:
    value = table.get(key, False)
    if not isinstance(value, bool):
        raise _bad_file(path, f"{where}.{key} must be true or false")
    return value


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
    if entry.local:
        # A local model serves exactly its configured name (its class's own when none is given).
        local: dict[str, Any] = {"models": (entry.model or _LOCAL_CLASS_MODELS[entry.class_name],)}
        if entry.latency_seconds is not None:
            local["latency_seconds"] = entry.latency_seconds
        return cast(Provider, factory(**local))
    options: dict[str, Any] = {}
    if entry.max_retries is not None:
        options["retry"] = RetryPolicy(max_retries=entry.max_retries)
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
    builders: dict[str, _LazyProvider] = {}
    default_provider: str = DEMO_PROVIDER
    default_model: str | None = None
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
        unknown_defaults = sorted(set(defaults) - {"provider", "model"})
        if unknown_defaults:
            raise _bad_file(path, f"[defaults] has unknown keys: {', '.join(unknown_defaults)}")
        default_provider = _string(path, defaults, "provider", "defaults") or default_provider
        if default_provider not in providers:
            raise _bad_file(path, f'defaults.provider "{default_provider}" is not registered')
        default_model = _string(path, defaults, "model", "defaults")
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
        builder(provider_id, None)  # builds it now: a missing SDK or key fails here, clearly


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
