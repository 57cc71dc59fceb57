"""Tools: what an agent's model may call, and the hooks that bracket a call.

Import every public name from here (``agentkeep`` re-exports the ones an embedding needs;
what only the runtime calls, ``execute_tool`` and ``validate_result``, stays in its module). The
package's modules, each importing only those listed before it:

- :mod:`.schema`: JSON Schemas of arguments (what providers are shown, why a value misfits);
- :mod:`.context`: what ``execute`` is handed (:class:`ToolContext`, :class:`BasicToolContext`);
- :mod:`.outputs`: what a call answers (:class:`ToolOutput`, :class:`ToolError`);
- :mod:`.definition`: :class:`Tool` (with its lifetime flags), :class:`ToolSet`, and the checks
  a definition passes when it is built;
- :mod:`.arguments`: a model's call as validated arguments (:func:`validate_arguments`);
- :mod:`.results`: running ``execute`` and validating what it returned;
- :mod:`.decorator`: :func:`tool`, a :class:`Tool` from a typed function;
- :mod:`.hooks`: the values the four tool-call hooks see and return (:class:`ToolCallInfo`,
  :class:`ToolCallDecision`, :class:`ToolCallResult`);
- :mod:`.provider_tools`: :class:`ProviderTool`, a tool the provider runs itself (a web
  search), declared to it and never executed here.
"""

from agentkeep.tools.arguments import GrammarInput, validate_arguments
from agentkeep.tools.context import BasicToolContext, ToolContext
from agentkeep.tools.decorator import tool
from agentkeep.tools.definition import Tool, ToolSet
from agentkeep.tools.hooks import ToolCallDecision, ToolCallInfo, ToolCallResult
from agentkeep.tools.outputs import ArgsT, ResultT, ToolError, ToolOutput, default_to_llm
from agentkeep.tools.provider_tools import ProviderTool
from agentkeep.tools.results import run_tool

__all__ = [
    "ArgsT",
    "BasicToolContext",
    "GrammarInput",
    "ProviderTool",
    "ResultT",
    "Tool",
    "ToolCallDecision",
    "ToolCallInfo",
    "ToolCallResult",
    "ToolContext",
    "ToolError",
    "ToolOutput",
    "ToolSet",
    "default_to_llm",
    "run_tool",
    "tool",
    "validate_arguments",
]
