"""The spans agentkeep emits and their attribute keys, in one place (docs/observability.md).

Span names follow OpenTelemetry's GenAI semantic conventions where one fits (an inference is
``chat {model}``, a tool call ``execute_tool {tool}``); the others are agentkeep's own.
Attribute keys are the GenAI conventions' (``gen_ai.*``) where they fit, and
``agentkeep.*`` for the lifecycle ids (docs/lifecycle.md) and the store.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "COMPACTION",
    "COMPACTION_ID",
    "DEFINITION_ID",
    "GEN_AI_AGENT_ID",
    "GEN_AI_CONVERSATION_ID",
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_PROVIDER_NAME",
    "GEN_AI_REQUEST_MODEL",
    "GEN_AI_RESPONSE_FINISH_REASONS",
    "GEN_AI_SYSTEM",
    "GEN_AI_TOOL_CALL_ID",
    "GEN_AI_TOOL_NAME",
    "GEN_AI_USAGE_INPUT_TOKENS",
    "GEN_AI_USAGE_OUTPUT_TOKENS",
    "INFERENCE_ID",
    "INFERENCE_OPERATION",
    "INFERENCE_STATE",
    "LOOP_ID",
    "SESSION_ID",
    "SETTLEMENT_ID",
    "STORE_COMMIT",
    "STORE_FAILED",
    "STORE_GROUP_SIZE",
    "TOOL_OPERATION",
    "TOOL_RESUMED",
    "TURN",
    "TURN_ABORTED",
    "TURN_ID",
    "inference_name",
    "tool_name",
]

# -- span names ----------------------------------------------------------------------------
#: One turn of an agent's loop (a turn sent over REST runs as one), from its start
#: (``before_turn``) to its end (``after_turn``), or to the run's stop.
TURN: Final = "agentkeep.turn"
#: One provider request: ``chat {model}`` (:func:`inference_name`).
INFERENCE_OPERATION: Final = "chat"
#: One tool call: ``execute_tool {tool}`` (:func:`tool_name`).
TOOL_OPERATION: Final = "execute_tool"
#: One compaction (its summarising request included).
COMPACTION: Final = "agentkeep.compaction"
#: One group commit of the store's writer: one transaction holding every work item of the
#: group (``agentkeep.store.group_size`` of them).
STORE_COMMIT: Final = "agentkeep.store.commit"

# -- GenAI semantic conventions ------------------------------------------------------------
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_SYSTEM: Final = "gen_ai.system"
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
GEN_AI_AGENT_ID: Final = "gen_ai.agent.id"

# -- agentkeep's own -------------------------------------------------------------------------
SESSION_ID: Final = "agentkeep.session.id"  # the agent (session) id
DEFINITION_ID: Final = "agentkeep.definition.id"  # the definition a session is pinned to
LOOP_ID: Final = "agentkeep.loop.id"
TURN_ID: Final = "agentkeep.turn.id"
INFERENCE_ID: Final = "agentkeep.inference.id"
SETTLEMENT_ID: Final = "agentkeep.settlement.id"
COMPACTION_ID: Final = "agentkeep.compaction.id"
TURN_ABORTED: Final = "agentkeep.turn.aborted"
TOOL_RESUMED: Final = "agentkeep.tool.resumed"  # a call a restart interrupted, run again
INFERENCE_STATE: Final = "agentkeep.inference.state"  # how the response ended
STORE_GROUP_SIZE: Final = "agentkeep.store.group_size"
STORE_FAILED: Final = "agentkeep.store.failed"  # items of the group that failed alone


def inference_name(model: str) -> str:
    """The span name of a provider request for ``model``."""
    return f"{INFERENCE_OPERATION} {model}"


def tool_name(tool: str) -> str:
    """The span name of a call of ``tool``."""
    return f"{TOOL_OPERATION} {tool}"
