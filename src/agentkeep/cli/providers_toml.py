"""The tables of ``providers.toml`` (the format is in :mod:`agentkeep.cli.config`), validated
into :class:`ProviderEntry` values; every mistake is a :func:`bad_providers_file` error naming
the file, the table and the key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from agentkeep.cli.output import EXIT_BAD_INPUT, CliError
from agentkeep.providers.compatibility import PROVIDER_KINDS, ProviderKind
from agentkeep.providers.demo import DEMO_MODEL
from agentkeep.providers.retry import MAX_RETRIES_CAP

PROVIDERS_FILE = "providers.toml"
LOCAL_PROVIDER = "local"
LOCAL_MODEL = "gym-1"

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
LOCAL_CLASS_MODELS = {"responding": LOCAL_MODEL, "demo": DEMO_MODEL}
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
        return self.model or LOCAL_CLASS_MODELS.get(self.class_name)


def bad_providers_file(path: Path, problem: str) -> CliError:
    """The error of a providers file that breaks the format (exit 2): ``problem`` says where."""
    return CliError(
        f"{path} is not a valid providers file: {problem}",
        code="invalid_providers_file",
        hint=f"Fix {path} (see `agentkeep --help`), or move it away to use the local model.",
        exit_code=EXIT_BAD_INPUT,
    )


def optional_string(path: Path, table: dict[str, Any], key: str, where: str) -> str | None:
    """``table[key]`` (``where`` names the table in errors): absent is None.

    Raises:
        CliError: It is present but not a non-empty string.
    """
    value = table.get(key)
    if value is not None and (not isinstance(value, str) or not value):
        raise bad_providers_file(path, f"{where}.{key} must be a non-empty string")
    return value


def parse_entry(path: Path, provider_id: str, table: Any) -> ProviderEntry:
    """The ``[providers.<provider_id>]`` table of the file at ``path``, validated.

    Raises:
        CliError: A key is unknown, a value has the wrong type or range, or the keys do not
            go together (``latency_seconds`` on a vendor class, ``api_key_env`` on a local one).
    """
    where = f"[providers.{provider_id}]"
    if not isinstance(table, dict):
        raise bad_providers_file(path, f"{where} must be a table")
    unknown = sorted(set(table) - _ENTRY_KEYS)
    if unknown:
        raise bad_providers_file(path, f"{where} has unknown keys: {', '.join(unknown)}")
    kind = table.get("kind")
    if kind not in PROVIDER_KINDS:
        raise bad_providers_file(path, f"{where}.kind must be one of {', '.join(PROVIDER_KINDS)}")
    class_name = table.get("class", "responding" if kind == "gym" else None)
    if class_name not in PROVIDER_CLASSES:
        raise bad_providers_file(
            path, f"{where}.class must be one of {', '.join(PROVIDER_CLASSES)}"
        )
    entry = ProviderEntry(
        id=provider_id,
        kind=cast(ProviderKind, kind),
        class_name=cast(str, class_name),
        model=optional_string(path, table, "model", where),
        base_url=optional_string(path, table, "base_url", where),
        api_key_env=optional_string(path, table, "api_key_env", where),
        latency_seconds=_latency(path, table, where),
        max_retries=_retries(path, table, where),
        demo_tools=_flag(path, table, "demo_tools", where),
    )
    if entry.class_name == "openai-compatible" and (entry.base_url is None or entry.model is None):
        raise bad_providers_file(path, f"{where}: class openai-compatible needs base_url and model")
    if entry.local and (entry.max_retries is not None or entry.api_key_env or entry.base_url):
        raise bad_providers_file(
            path, f"{where}: max_retries, base_url and api_key_env are for vendor classes only"
        )
    if not entry.local and entry.latency_seconds is not None:
        raise bad_providers_file(path, f"{where}: latency_seconds is for local classes only")
    return entry


def _latency(path: Path, table: dict[str, Any], where: str) -> float | None:
    value = table.get("latency_seconds")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise bad_providers_file(path, f"{where}.latency_seconds must be a number of seconds")
    if not 0 <= value <= 60:
        raise bad_providers_file(path, f"{where}.latency_seconds must be within 0..60")
    return float(value)


def _retries(path: Path, table: dict[str, Any], where: str) -> int | None:
    value = table.get("max_retries")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_providers_file(path, f"{where}.max_retries must be a whole number")
    if not 0 <= value <= MAX_RETRIES_CAP:
        raise bad_providers_file(path, f"{where}.max_retries must be within 0..{MAX_RETRIES_CAP}")
    return value


def _flag(path: Path, table: dict[str, Any], key: str, where: str) -> bool:
    value = table.get(key, False)
    if not isinstance(value, bool):
        raise bad_providers_file(path, f"{where}.{key} must be true or false")
    return value
