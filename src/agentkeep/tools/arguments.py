"""How a model's tool call becomes a tool's validated arguments.

Nothing a model sends can raise out of here:
:func:`validate_arguments` returns either the validated arguments or a
:class:`~agentkeep.tools.ToolError` whose message the loop hands back to the model.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentkeep.tools.definition import Tool
from agentkeep.tools.outputs import ArgsT, ToolError
from agentkeep.tools.schema import issue_from_msgspec, schema_issues
from agentkeep.types import ToolCallBlock

MAX_ISSUES = 8  # a schema mismatch lists at most 8 issues


class GrammarInput(msgspec.Struct, frozen=True):
    """The arguments of a grammar tool: the model's raw input."""

    input: str


def _mismatch(name: str, issues: list[str]) -> ToolError:
    lines = [f'The arguments for "{name}" did not match the schema:']
    lines += [f"- {issue}" for issue in issues[:MAX_ISSUES]]
    if len(issues) > MAX_ISSUES:
        lines.append(f"- (and {len(issues) - MAX_ISSUES} more)")
    return ToolError("\n".join(lines))


def validate_arguments(tool: Tool[ArgsT, Any] | None, call: ToolCallBlock) -> ArgsT | ToolError:
    """The validated arguments of ``call`` for ``tool``, or the error the model is told.

    In order: a missing tool, an incomplete call, a grammar tool's raw input as
    ``{"input": raw}``, blank arguments as ``{}``, invalid JSON, then a schema mismatch
    listing up to 8 issues with exact paths. Never raises.
    """
    if tool is None:
        return ToolError(f'Tool "{call.name}" is not available.')
    if call.incomplete:
        return ToolError("The tool call was incomplete and was not executed.")
    raw = call.arguments
    try:
        if tool.grammar is not None:
            payload: object = {"input": raw}
        elif raw.strip() == "":
            payload = {}
        else:
            try:
                payload = msgspec.json.decode(raw)
            except msgspec.DecodeError:
                return ToolError(f'The arguments for "{call.name}" were not valid JSON.')
        try:
            return msgspec.json.decode(msgspec.json.encode(payload), type=tool.args_type)
        except msgspec.ValidationError as error:
            issues = schema_issues(tool.arguments_schema, payload) or [issue_from_msgspec(error)]
            return _mismatch(call.name, [str(issue) for issue in issues])
    except Exception as error:  # the model's input must never crash the loop
        return ToolError(f'The arguments for "{call.name}" could not be read: {error}')
