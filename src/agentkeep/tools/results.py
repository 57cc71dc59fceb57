"""How a tool's ``execute`` runs and its return value becomes what the model is answered.

:func:`validate_result` checks a return value against
the tool's ``result_type`` and renders it with ``to_llm`` / ``is_error``; :func:`execute_tool`
and :func:`run_tool` run a tool and do both. None of them raises for what a tool returns or
raises: a failure becomes a :class:`ToolError`, answered to the model as an error result.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentkeep.tools.context import ToolContext
from agentkeep.tools.definition import Tool
from agentkeep.tools.outputs import ArgsT, ResultT, ToolError, ToolOutput
from agentkeep.types import ImageBlock, TextBlock


def validate_result(tool: Tool[Any, ResultT], value: object) -> ToolOutput | ToolError:
    """Validate what ``execute`` returned against ``tool.result_type`` and render it.

    Returns the content blocks from ``to_llm`` and ``is_error``, or a :class:`ToolError` if
    the result does not match its type or ``to_llm``/``is_error`` fail. Never raises.
    """
    name = tool.name
    try:
        encoded = msgspec.json.encode(value)
        typed = msgspec.json.decode(encoded, type=tool.result_type)
    except msgspec.ValidationError as error:
        return ToolError(f'The result of "{name}" did not match its declared type: {error}')
    except Exception as error:
        return ToolError(f'The result of "{name}" could not be encoded: {error}')
    # An untyped result keeps the object itself (decoding would turn a Struct into a dict).
    result: Any = value if tool.result_type in (Any, object) else typed
    try:
        blocks = tool.to_llm(result)
        if not isinstance(blocks, tuple | list) or not all(
            isinstance(block, TextBlock | ImageBlock) for block in blocks
        ):
            raise TypeError("to_llm must return a tuple of text and image blocks")
        is_error = tool.is_error(result)
    except Exception as error:
        return ToolError(f'The result of "{name}" could not be rendered: {error}')
    return ToolOutput(content=tuple(blocks), is_error=bool(is_error))


def run_tool(tool: Tool[ArgsT, Any], ctx: ToolContext, args: ArgsT) -> ToolOutput | ToolError:
    """Execute ``tool`` and validate its result; an exception becomes a :class:`ToolError`.

    Only ``Exception`` is caught: cancellation signals deriving from ``BaseException`` pass.
    """
    return execute_tool(tool, ctx, args)[0]


def execute_tool(
    tool: Tool[ArgsT, Any], ctx: ToolContext, args: ArgsT
) -> tuple[ToolOutput | ToolError, Any]:
    """:func:`run_tool`, also returning what ``execute`` returned (None if it raised)."""
    try:
        value = tool.execute(ctx, args)
    except Exception as error:
        return ToolError(f'The tool "{tool.name}" failed: {error}'), None
    return validate_result(tool, value), value
