"""Running one tool call (in its child's thread): resolve, validate, execute, validate the
result, render it — every failure an error result for the model, never an exception."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentkeep.actors.services import AgentServices
from agentkeep.loop.messages import ToolRun
from agentkeep.persistence.records import Settings
from agentkeep.providers.protocol import CancelToken
from agentkeep.providers.types import TextBlock, ToolResultMessage
from agentkeep.tools import ToolError, ToolSet, run_tool, validate_arguments

INTERRUPTED_CALL = "The tool call was interrupted by a restart and was not retried."


@dataclass(frozen=True, kw_only=True)
class CallContext:
    """The :class:`~agentkeep.tools.ToolContext` the runtime hands a tool."""

    agent_id: str
    call_id: str
    provider_call_id: str
    cancel: CancelToken
    kv: Any
    system: Any = None


class ToolRunner:
    def __init__(self, services: AgentServices) -> None:
        self._s = services

    def tool_set(self, settings: Settings) -> ToolSet:
        """The tools this agent offers now: the system's, then each feature's. Raises on a
        failing tools hook or a duplicate (namespace, name) — a correctness failure."""
        ctx_for = lambda feature: self._s.hook_context(feature, settings)  # noqa: E731
        return ToolSet(self._s.features.tools(self._s.tools, ctx_for))

    def bind(
        self, run: ToolRun, cancel: CancelToken, tools: ToolSet
    ) -> Callable[[], ToolResultMessage]:
        """The work of one call, to run in the call's own thread."""

        def execute() -> ToolResultMessage:
            call = run.call
            tool = tools.for_call(call)
            if tool is not None and run.resumed and not tool.durable:
                # It may have had its side effect before the crash: never run it twice.
                return _error(call.call_id, INTERRUPTED_CALL)
            args = validate_arguments(tool, call)
            if isinstance(args, ToolError) or tool is None:
                message = args.message if isinstance(args, ToolError) else "unreachable"
                return _error(call.call_id, message)
            running = [True]
            ctx = CallContext(
                agent_id=self._s.agent_id,
                call_id=run.internal_id,
                provider_call_id=call.call_id,
                cancel=cancel,
                kv=self._s.call_kv(run.internal_id, lambda: running[0]),
                system=self._s.system_ref,
            )
            try:
                with self._s.inside_loop():
                    output = run_tool(tool, ctx, args)
            finally:
                running[0] = False  # the call's store expires with the call
            if isinstance(output, ToolError):
                return _error(call.call_id, output.message)
            return ToolResultMessage(
                call_id=call.call_id, content=output.content, is_error=output.is_error
            )

        return execute


def _error(call_id: str, text: str) -> ToolResultMessage:
    return ToolResultMessage(call_id=call_id, content=(TextBlock(text=text),), is_error=True)
