"""The :func:`tool` decorator: a :class:`~agentkeep.tools.Tool` from a typed function.

The name defaults to the function's, the description to its docstring, the arguments and
result types to its annotations (``args_type`` / ``result_type`` override them; a grammar
tool without an arguments annotation takes :class:`~agentkeep.tools.GrammarInput`).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any, overload

from agentkeep.errors import ToolDefinitionError
from agentkeep.tools.arguments import GrammarInput
from agentkeep.tools.context import ToolContext
from agentkeep.tools.definition import Tool
from agentkeep.tools.outputs import ArgsT, ResultT
from agentkeep.types import OutputBlock

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


@overload
def tool(function: Callable[[ToolContext, ArgsT], ResultT], /) -> Tool[ArgsT, ResultT]: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    namespace: str | None = None,
    namespace_description: str | None = None,
    durable: bool = False,
    transactional: bool = False,
    reloadable: bool = False,
    steerable: bool = False,
    grammar: str | None = None,
    defer: bool = False,
    review_in_auto_mode: bool = True,
    to_llm: Callable[[Any], tuple[OutputBlock, ...]] | None = None,
    is_error: Callable[[Any], bool] | None = None,
    args_type: type[Any] | None = None,
    result_type: Any = MISSING,
    visible_to_user: bool = True,
    persist_in_history: bool = True,
) -> Callable[[Callable[[ToolContext, Any], Any]], Tool[Any, Any]]: ...


def tool(
    function: Callable[[ToolContext, Any], Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    namespace: str | None = None,
    namespace_description: str | None = None,
    durable: bool = False,
    transactional: bool = False,
    reloadable: bool = False,
    steerable: bool = False,
    grammar: str | None = None,
    defer: bool = False,
    review_in_auto_mode: bool = True,
    to_llm: Callable[[Any], tuple[OutputBlock, ...]] | None = None,
    is_error: Callable[[Any], bool] | None = None,
    args_type: type[Any] | None = None,
    result_type: Any = MISSING,
    visible_to_user: bool = True,
    persist_in_history: bool = True,
) -> Tool[Any, Any] | Callable[[Callable[[ToolContext, Any], Any]], Tool[Any, Any]]:
    """Build a :class:`Tool` from a typed function ``(ctx, args: SomeStruct) -> Result``.

    Used bare (``@tool``) or with options (``@tool(durable=True)``). The name defaults to
    the function's, the description to its docstring, the arguments and result types to
    its annotations (``args_type`` / ``result_type`` override them). ``durable``,
    ``transactional``, ``reloadable`` and ``steerable`` are the lifetime flags of the
    :mod:`agentkeep.tools.definition` docstring.

    Raises:
        ToolDefinitionError: Missing annotations, a bad name, or unsupported types.
    """
    options: dict[str, Any] = {
        "name": name,
        "description": description,
        "namespace": namespace,
        "namespace_description": namespace_description,
        "durable": durable,
        "transactional": transactional,
        "reloadable": reloadable,
        "steerable": steerable,
        "grammar": grammar,
        "defer": defer,
        "review_in_auto_mode": review_in_auto_mode,
        "to_llm": to_llm,
        "is_error": is_error,
        "args_type": args_type,
        "result_type": result_type,
        "visible_to_user": visible_to_user,
        "persist_in_history": persist_in_history,
    }
    if function is not None:
        return Tool(**tool_fields(function, options))

    def decorate(inner: Callable[[ToolContext, Any], Any]) -> Tool[Any, Any]:
        return Tool(**tool_fields(inner, dict(options)))

    return decorate
