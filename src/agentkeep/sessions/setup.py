"""What a pinned revision configures: the session's settings, instructions and tools.

Checked when the session starts, never at its first turn (SURFACES §2):

- ``driver.id`` must be ``agentkeep`` or a driver registered at
  ``AgentSystem.open(drivers=...)``: :class:`UnsupportedDriverError` otherwise. An injected
  driver interprets its revision itself: the checks below are the native driver's and are
  not made for it (docs/drivers.md).
- ``model.id`` is ``provider/model`` (split at the first ``/``; the model part may hold more
  slashes). The provider must be registered and serve the model (``ModelNotServedError``).
  ``model`` None: the system's default provider and model.
- ``model.settings`` may hold ``effort``, ``serviceTier`` and ``permissionMode`` (the values
  :class:`~agentkeep.model.Settings` takes); any other key is refused, since the native
  driver would silently ignore it.
- ``toolbox.toolIds`` name the system's tools (registered at ``AgentSystem.open(tools=)``)
  the session may use: a tool's id is its ``name``, or ``namespace.name``. An unknown id is
  refused. The features' own tools are offered as to every agent.
- ``instructions`` replace the system's base instructions (``open(instructions=)``) for this
  session; the features' ``instructions`` hooks still append to them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from agentkeep.errors import UnknownProviderError
from agentkeep.logs import get_logger
from agentkeep.model import Settings
from agentkeep.providers.registry import Providers
from agentkeep.registry.types import DEFAULT_DRIVER_ID, Definition
from agentkeep.sessions.errors import SessionConfigError, UnsupportedDriverError
from agentkeep.tools import Tool

log = get_logger(__name__)

#: ``model.settings`` keys the native driver understands, and their ``Settings`` fields.
_SETTINGS = {"effort": "effort", "serviceTier": "service_tier", "permissionMode": "permission_mode"}


def tool_id(tool: Tool[Any, Any]) -> str:
    """The id a definition's ``toolbox.toolIds`` names ``tool`` by: ``name`` or
    ``namespace.name`` (names never hold a dot, so the id is unambiguous)."""
    return tool.name if tool.namespace is None else f"{tool.namespace}.{tool.name}"


def select_tools(tools: Sequence[Tool[Any, Any]], tool_ids: Sequence[str]) -> list[Tool[Any, Any]]:
    """The system's tools named by ``tool_ids``, in the system's order. An id naming no tool
    (:func:`check` refused it at start, so the system was reopened without it) is logged and
    not offered."""
    wanted = set(tool_ids)
    missing = wanted - {tool_id(tool) for tool in tools}
    if missing:
        log.warning("session_tools_missing", tool_ids=sorted(missing))
    return [tool for tool in tools if tool_id(tool) in wanted]


def settings_of(definition: Definition, providers: Providers, defaults: Settings) -> Settings:
    """The settings a session of ``definition`` starts with, checked against ``providers``.

    Raises:
        SessionConfigError: the provider is not registered, or a setting is unknown or has a
            value agentkeep does not take.
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
            "model.id", f'provider "{provider}" is not registered in this system'
        ) from None
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


def check(
    definition: Definition,
    *,
    providers: Providers,
    tools: Sequence[Tool[Any, Any]],
    defaults: Settings,
    drivers: frozenset[str] = frozenset(),
) -> Settings | None:
    """Check everything ``definition`` configures (module docstring); returns its settings
    (None for a session of an injected driver, whose revision configures that driver).

    Raises:
        UnsupportedDriverError: the driver is neither ``agentkeep`` nor one of ``drivers``.
        SessionConfigError: a tool id is unknown, or the model is refused.
        ModelNotServedError: the provider does not serve the model.
    """
    if definition.driver.id != DEFAULT_DRIVER_ID:
        if definition.driver.id in drivers:
            return None
        raise UnsupportedDriverError(definition.driver.id, available=drivers)
    known = {tool_id(tool) for tool in tools}
    for index, wanted in enumerate(definition.toolbox.tool_ids):
        if wanted not in known:
            raise SessionConfigError(
                f"toolbox.toolIds[{index}]",
                f'no tool "{wanted}" is registered in this system '
                f"(registered: {sorted(known) or 'none'})",
            )
    return settings_of(definition, providers, defaults)
