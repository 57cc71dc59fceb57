"""What a pinned revision configures: the session's settings, instructions and tools.

Checked when the session starts, never at its first turn (docs/registry.md):

- ``driver.id`` must be ``agentkeep`` or a driver registered at
  ``AgentSystem.open(drivers=...)``: :class:`UnsupportedDriverError` otherwise. An injected
  driver interprets its revision itself: the checks below are the native driver's and are
  not made for it (docs/drivers.md).
- ``model.id`` is ``provider/model`` (split at the first ``/``; the model part may hold more
  slashes). The provider must be registered and serve the model (``ModelNotServedError``).
  ``model`` None: the system's default provider and model.
- ``model.settings`` may hold ``effort``, ``serviceTier`` and ``permissionMode`` (the values
  :class:`~agentkeep.types.Settings` takes); any other key is refused, since the native
  driver would silently ignore it.
- ``toolbox.toolIds`` select the tools the native loop offers, by one rule: an empty list
  (the default) offers every tool the system offers, as to an agent made without a
  definition; a non-empty list offers exactly the tools it names, and no other. The ids it
  may name are the tools the system offers: those registered at
  ``AgentSystem.open(tools=)`` and those its features list in ``Feature.tool_catalog`` (the
  CLI's ``calculator``, ``word_count``, …). A tool's id is its ``name``, or
  ``namespace.name``. An unknown id is refused, naming the field and the known ids.
- ``instructions`` replace the system's base instructions (``open(instructions=)``) for this
  session; the features' ``instructions`` hooks still append to them.

``model.id`` is checked earlier as well, when a definition is written
(:func:`check_written_model`, the check ``AgentSystem.registry`` passes to its registry): a
create or a patch naming a provider the system does not have, or a model its provider does
not serve, is refused then, naming ``model.id`` and what is registered. The check at start
stays: a definition written under other providers (``providers.toml`` edited, a daemon
restarted) stays readable, and a session of it is refused here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from agentkeep.errors import ModelNotServedError, ProviderUnavailableError, UnknownProviderError
from agentkeep.features import FeatureSet
from agentkeep.logs import get_logger
from agentkeep.providers.catalog import Providers
from agentkeep.registry.errors import InvalidDefinitionError
from agentkeep.registry.types import DEFAULT_DRIVER_ID, Definition
from agentkeep.sessions.errors import SessionConfigError, UnsupportedDriverError
from agentkeep.tools import Tool
from agentkeep.types import Settings

log = get_logger(__name__)

#: ``model.settings`` keys the native driver understands, and their ``Settings`` fields.
_SETTINGS = {"effort": "effort", "serviceTier": "service_tier", "permissionMode": "permission_mode"}


def offered_ids(tools: Sequence[Tool[Any, Any]], features: FeatureSet) -> list[str]:
    """The ids of every tool the system offers: its own, then its features' catalogs."""
    ids = [tool.id for tool in tools]
    ids += [tool.id for tool in features.tool_catalog() if tool.id not in ids]
    return ids


def selection(
    tool_ids: Sequence[str], tools: Sequence[Tool[Any, Any]], features: FeatureSet
) -> frozenset[str] | None:
    """The ids of the only tools a session is offered (the module's rule): None (every tool)
    for an empty ``tool_ids``. An id naming no tool the system offers now (:func:`check`
    refused such ids at start, so the system was reopened without it) is logged; it offers
    nothing."""
    if not tool_ids:
        return None
    missing = set(tool_ids) - set(offered_ids(tools, features))
    if missing:
        log.warning("session_tools_missing", tool_ids=sorted(missing))
    return frozenset(tool_ids)


def settings_of(definition: Definition, providers: Providers, defaults: Settings) -> Settings:
    """The settings a session of ``definition`` starts with, checked against ``providers``.

    Raises:
        SessionConfigError: the provider is not registered, or a setting is unknown or has a
            value agentkeep does not take.
        ProviderUnavailableError: the provider is registered but cannot be used (its API key
            is unset, its SDK missing): ``field`` is ``model.id``.
        ModelNotServedError: the provider does not serve the model.
    """
    model = definition.model
    if model is None:
        return defaults
    provider, _, name = model.id.partition("/")
    if not provider or not name:
        raise SessionConfigError("model.id", f'"{model.id}" is not "provider/model"')
    try:
        providers.check_model(provider, name)
    except UnknownProviderError:
        raise SessionConfigError(
            "model.id",
            f'provider "{provider}" is not registered in this system '
            f"(registered: {', '.join(providers.ids()) or 'none'})",
        ) from None
    except ProviderUnavailableError as error:  # registered, but it cannot start (no API key)
        raise ProviderUnavailableError(provider, error.reason, field="model.id") from error
    values: dict[str, Any] = {"provider": provider, "model": name}
    for key, value in model.settings.items():
        if key not in _SETTINGS:
            raise SessionConfigError(
                f"model.settings.{key}",
                f"not a setting of the agentkeep driver (it takes {sorted(_SETTINGS)})",
            )
        if value is not None:
            values[_SETTINGS[key]] = value
    try:
        return msgspec.convert(values, Settings)
    except msgspec.ValidationError as error:
        raise SessionConfigError("model.settings", str(error)) from None


def check_written_model(definition: Definition, *, providers: Providers) -> None:
    """Refuse to write ``definition`` if its ``model.id`` cannot run in this system: not
    ``provider/model``, a provider not registered, or a model the provider does not serve.

    Only for the native driver (an injected driver interprets its revision itself), and only
    what the registry can tell now: a registered provider that cannot be asked (its API key is
    unset) is let through, and refused at session start if it still cannot be used.

    Raises:
        InvalidDefinitionError: ``field`` is ``model.id``; the message says what is
            registered (or what the provider serves).
    """
    model = definition.model
    if model is None or definition.driver.id != DEFAULT_DRIVER_ID:
        return
    provider, _, name = model.id.partition("/")
    if not provider or not name:
        raise InvalidDefinitionError(
            "model.id",
            f'"{model.id}" is not "provider/model" (registered providers: '
            f"{', '.join(providers.ids()) or 'none'})",
        )
    try:
        providers.check_model(provider, name)
    except UnknownProviderError:
        raise InvalidDefinitionError(
            "model.id",
            f'provider "{provider}" is not registered in this system '
            f"(registered: {', '.join(providers.ids()) or 'none'})",
        ) from None
    except ModelNotServedError as error:
        raise InvalidDefinitionError(
            "model.id",
            f'provider "{provider}" does not serve model "{name}" (it serves: {error.served})',
        ) from None
    except ProviderUnavailableError:
        return


def check(
    definition: Definition,
    *,
    providers: Providers,
    tools: Sequence[Tool[Any, Any]],
    defaults: Settings,
    drivers: frozenset[str] = frozenset(),
    features: FeatureSet | None = None,
) -> Settings | None:
    """Check everything ``definition`` configures (module docstring); returns its settings
    (None for a session of an injected driver, whose revision configures that driver).

    Raises:
        UnsupportedDriverError: the driver is neither ``agentkeep`` nor one of ``drivers``.
        SessionConfigError: a tool id is unknown, or the model is refused.
        ProviderUnavailableError: the provider cannot be used (its API key is unset).
        ModelNotServedError: the provider does not serve the model.
    """
    if definition.driver.id != DEFAULT_DRIVER_ID:
        if definition.driver.id in drivers:
            return None
        raise UnsupportedDriverError(definition.driver.id, available=drivers)
    known = offered_ids(tools, features or FeatureSet(()))
    for index, wanted in enumerate(definition.toolbox.tool_ids):
        if wanted not in known:
            raise SessionConfigError(
                f"toolbox.toolIds[{index}]",
                f'no tool "{wanted}" is offered by this system '
                f"(its tools: {', '.join(sorted(known)) or 'none'})",
            )
    return settings_of(definition, providers, defaults)
