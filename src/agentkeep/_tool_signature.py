"""How the :func:`~agentkeep.tools.tool` decorator reads a typed function into a tool's fields.

The name defaults to the function's, the description to its docstring, the arguments and
result types to its annotations (``args_type`` / ``result_type`` override them; a grammar
tool without an arguments annotation takes :class:`~agentkeep.tools.GrammarInput`).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any

from agentkeep._tool_arguments import GrammarInput
from agentkeep._tool_context import ToolContext
from agentkeep.errors import ToolDefinitionError

# The default of ``result_type``: "read it from the annotation" (None means ``NoneType``).
MISSING: Any = object()


def tool_fields(
    function: Callable[[ToolContext, Any], Any], options: dict[str, Any]
) -> dict[str, Any]:
    """The keyword arguments of the ``Tool`` the decorator builds from ``function``.

    ``options`` are the decorator's keyword arguments (it is consumed); a ``to_llm`` or
    ``is_error`` left None keeps the ``Tool`` default.

    Raises:
        ToolDefinitionError: unreadable or missing annotations, or not ``(ctx, args)``.
    """
    try:
        hints = typing.get_type_hints(function)
    except Exception as error:
        raise ToolDefinitionError(
            f"Cannot read the type hints of {function.__name__}: {error}"
        ) from error
    parameters = list(inspect.signature(function).parameters)
    if len(parameters) != 2:
        raise ToolDefinitionError(
            f"A tool function takes (ctx, args); {function.__name__} takes {len(parameters)}."
        )
    args_type = options.pop("args_type") or hints.get(parameters[1])
    if args_type is None and options.get("grammar") is not None:
        args_type = GrammarInput
    if args_type is None:
        raise ToolDefinitionError(f"Annotate the arguments of {function.__name__}.")
    result_type = options.pop("result_type")
    if result_type is MISSING:
        if "return" not in hints:
            raise ToolDefinitionError(f"Annotate the return type of {function.__name__}.")
        result_type = hints["return"]
    if result_type is None:
        result_type = type(None)
    for key in ("to_llm", "is_error"):
        if options[key] is None:
            del options[key]
    description = options.pop("description")
    if description is None:
        description = inspect.getdoc(function)
    return {
        "name": options.pop("name") or function.__name__,
        "description": description,
        "args_type": args_type,
        "result_type": result_type,
        "execute": function,
        **options,
    }
