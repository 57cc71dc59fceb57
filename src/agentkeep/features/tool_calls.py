"""Chaining the features' ``before_tool_call`` over one validated call (the second of the four
tool-call hooks of :mod:`agentkeep.tools.hooks`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from agentkeep.features.arguments import HookContext
from agentkeep.features.feature import Feature
from agentkeep.logs import get_logger
from agentkeep.tools import (
    ToolCallDecision,
    ToolCallInfo,
    ToolCallResult,
    ToolError,
    ToolSet,
    validate_arguments,
)
from agentkeep.tools.hooks import failed

log = get_logger(__name__)


def decide(
    features: Sequence[Feature],
    ctx_for: Callable[[Feature], HookContext],
    info: ToolCallInfo,
    tools: ToolSet,
) -> tuple[ToolCallInfo, ToolCallResult | None]:
    """Chain the features' ``before_tool_call`` over a validated call.

    Returns the call as the chain left it (amended, resolved and validated) and, if the tool
    must not run, the result the model gets instead: the first answer, a refused amendment,
    or a failing hook's error.
    """
    for feature in features:
        try:
            decision = feature.before_tool_call(ctx_for(feature), info)
            if decision is None:
                continue
            if not isinstance(decision, ToolCallDecision):
                raise TypeError(f"it returned {decision!r}, not a ToolCallDecision or None")
            if decision.answer is not None:
                answer = ToolCallResult(
                    content=decision.content(),
                    is_error=decision.is_error,
                    answered_by=feature.name,
                )
                return info, answer
            amended = decision.amend(info.call)
        except Exception as error:
            log.warning(
                "feature_hook_failed",
                feature=feature.name,
                hook="before_tool_call",
                error=repr(error),
            )
            text = f'The before_tool_call hook of feature "{feature.name}" failed: {error}'
            return info, failed(text)
        tool = tools.for_call(amended)
        mode = decision.permission_mode or info.permission_mode
        arguments = validate_arguments(tool, amended)
        if isinstance(arguments, ToolError):
            refused = replace(info, call=amended, tool=tool, arguments=None, permission_mode=mode)
            return refused, failed(arguments.message)
        info = replace(info, call=amended, tool=tool, arguments=arguments, permission_mode=mode)
    return info, None
