"""Building the adapter of a ``providers.toml`` entry: its module is imported only when the
provider is first used, so a missing SDK or adapter affects only the commands that select that
provider, with a message saying what to install.
"""

from __future__ import annotations

import importlib
import os
import threading
from typing import Any, cast

from agentkeep.cli.output import CliError
from agentkeep.cli.providers_toml import LOCAL_CLASS_MODELS, PROVIDER_CLASSES, ProviderEntry
from agentkeep.errors import AgentkeepError, ProviderUnavailableError
from agentkeep.providers.protocol import Provider, ServesModels
from agentkeep.providers.retry import RetryPolicy


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
        local: dict[str, Any] = {"models": (entry.model or LOCAL_CLASS_MODELS[entry.class_name],)}
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
                hint=f"export {entry.api_key_env}=... and run the command again (a daemon, "
                "`agentkeep serve`, must be restarted with it).",
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


class LazyProvider:
    """A registry factory that builds the adapter on first use, then reuses it.

    As a factory (called by the registry: a session start, a message, a turn) a failure to
    build is a :class:`~agentkeep.errors.ProviderUnavailableError` saying what is missing
    and how to fix it, so every surface refuses it as a configuration problem (a 422 over
    REST, never a 500); :meth:`build` keeps the CLI's own error for commands that check
    a provider before they start.
    """

    def __init__(self, entry: ProviderEntry) -> None:
        self._entry = entry
        self._lock = threading.Lock()
        self._built: Provider | None = None

    def build(self) -> Provider:
        """The adapter, built now if it was not yet.

        Raises:
            CliError: it cannot be built (see :func:`build_provider`).
        """
        with self._lock:
            if self._built is None:
                self._built = build_provider(self._entry)
            return self._built

    def __call__(self, provider_id: str, model: str | None) -> Provider:
        try:
            return self.build()
        except CliError as error:
            said, named = error.message, f'Provider "{provider_id}" '
            reason = f"it {said[len(named) :]}" if said.startswith(named) else said
            if error.hint is not None:
                reason = f"{reason} {error.hint}"
            raise ProviderUnavailableError(provider_id, reason) from error

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
