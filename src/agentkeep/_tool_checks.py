"""The checks a :class:`~agentkeep.tools.Tool` definition passes when it is built.

A bad definition fails at once with a :class:`~agentkeep.errors.ToolDefinitionError` naming
what is wrong, never later when a model calls the tool.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import msgspec

from agentkeep._tool_schema import parameters_schema
from agentkeep.errors import ToolDefinitionError

if TYPE_CHECKING:
    from agentkeep.tools import Tool

NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what both Anthropic and OpenAI accept


def checked_schemas(tool: Tool[Any, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Check ``tool``'s definition; return its arguments' raw and provider JSON Schemas.

    Checked in order: the name and namespace, a ``msgspec.Struct`` arguments type, a callable
    ``execute``, the hiding flags (:func:`refuse_hiding`), types msgspec supports, and
    arguments that encode as a JSON object.

    Raises:
        ToolDefinitionError: the first check that fails, naming the tool.
    """
    if not isinstance(tool.name, str) or not NAME.match(tool.name):
        raise ToolDefinitionError(f"Tool name {tool.name!r} must match {NAME.pattern}.")
    if tool.namespace is not None and not NAME.match(tool.namespace):
        raise ToolDefinitionError(
            f"Namespace {tool.namespace!r} of tool {tool.name!r} must match {NAME.pattern}."
        )
    if not (isinstance(tool.args_type, type) and issubclass(tool.args_type, msgspec.Struct)):
        raise ToolDefinitionError(
            f'The arguments of tool "{tool.name}" must be a msgspec.Struct, not {tool.args_type!r}.'
        )
    if not callable(tool.execute):
        raise ToolDefinitionError(f'Tool "{tool.name}" needs a callable execute.')
    refuse_hiding(tool.name, tool.visible_to_user, tool.persist_in_history)
    try:
        raw = msgspec.json.schema(tool.args_type)
        parameters = parameters_schema(tool.args_type)
        msgspec.json.Decoder(tool.result_type)
    except (TypeError, ValueError) as error:
        raise ToolDefinitionError(
            f'Tool "{tool.name}" uses an unsupported type: {error}'
        ) from error
    if parameters.get("type") != "object":
        raise ToolDefinitionError(
            f'The arguments of tool "{tool.name}" must encode as a JSON object '
            "(array_like structs are not allowed)."
        )
    return raw, parameters


def refuse_hiding(name: str, visible_to_user: object, persist_in_history: object) -> None:
    """An executable tool cannot hide from correctness or security observers (seed 001):
    only a provider-owned server tool may suppress its live events or its history."""
    for flag, value in (
        ("visible_to_user", visible_to_user),
        ("persist_in_history", persist_in_history),
    ):
        if value is not True:
            raise ToolDefinitionError(
                f'Tool "{name}" sets {flag}={value!r}, but an executable tool cannot hide '
                "from correctness or security observers; only a provider-owned server tool "
                "(ak.ServerTool, passed as AgentSystem.open(server_tools=...)) may set it."
            )
