"""agentkeep: a durable agent runtime for Python.

Agents are actors under a supervision tree; every queued message, finished assistant block,
dispatched tool batch, tool result and compaction is committed to SQLite before anything acts
on it, so a process killed at any instant resumes exactly where it stopped.

The public API is re-exported here; everything else is private by default.
"""

from agentkeep.agent import Agent
from agentkeep.agent_rows import AgentInfo
from agentkeep.agent_system import AgentSystem
from agentkeep.config import AgentConfig, current_environment
from agentkeep.delivery import Delivery, system, tool_request, user
from agentkeep.errors import (
    AgentClosedError,
    AgentExistsError,
    AgentkeepError,
    AwaitFromOwnLoopError,
    CommitOutcomeUnknownError,
    CompactionFailedError,
    DuplicateProviderError,
    ExpiredScopeError,
    InvalidConfigError,
    InvalidMessageError,
    MissingExtraError,
    ModelNotServedError,
    ProviderError,
    SchemaTooNewError,
    StoreClosedError,
    StoreError,
    StoreLockedError,
    ToolDefinitionError,
    UnknownAgentError,
    UnknownProviderError,
)
from agentkeep.features import (
    Feature,
    HookContext,
    InferenceInfo,
    MessageAccepted,
    MetadataChange,
    ModelChange,
    TurnInfo,
)
from agentkeep.history import HistoryEpoch, PurgeResult
from agentkeep.loop.messages import CompactAction, InjectAction, SendAction, SteerAction
from agentkeep.persistence.records import AgentEnvironment, Settings
from agentkeep.providers import (
    CancelToken,
    Provider,
    Providers,
    RespondingModel,
    ScriptedModel,
    ServesModels,
    Session,
    script,
)
from agentkeep.providers.types import (
    AgentMessage,
    AssistantMessage,
    CompactionMessage,
    ImageBlock,
    Message,
    ReasoningBlock,
    SystemMessage,
    TextBlock,
    ToolCallBlock,
    ToolCallRequestBlock,
    ToolResultMessage,
    UserMessage,
)
from agentkeep.tool_hooks import ToolCallDecision, ToolCallInfo, ToolCallResult
from agentkeep.tools import Tool, ToolContext, tool

__all__ = [
    "Agent",
    "AgentClosedError",
    "AgentConfig",
    "AgentEnvironment",
    "AgentExistsError",
    "AgentInfo",
    "AgentMessage",
    "AgentSystem",
    "AgentkeepError",
    "AssistantMessage",
    "AwaitFromOwnLoopError",
    "CancelToken",
    "CommitOutcomeUnknownError",
    "CompactAction",
    "CompactionFailedError",
    "CompactionMessage",
    "Delivery",
    "DuplicateProviderError",
    "ExpiredScopeError",
    "Feature",
    "HistoryEpoch",
    "HookContext",
    "ImageBlock",
    "InferenceInfo",
    "InjectAction",
    "InvalidConfigError",
    "InvalidMessageError",
    "Message",
    "MessageAccepted",
    "MetadataChange",
    "MissingExtraError",
    "ModelChange",
    "ModelNotServedError",
    "Provider",
    "ProviderError",
    "Providers",
    "PurgeResult",
    "ReasoningBlock",
    "RespondingModel",
    "SchemaTooNewError",
    "ScriptedModel",
    "SendAction",
    "ServesModels",
    "Session",
    "Settings",
    "SteerAction",
    "StoreClosedError",
    "StoreError",
    "StoreLockedError",
    "SystemMessage",
    "TextBlock",
    "Tool",
    "ToolCallBlock",
    "ToolCallDecision",
    "ToolCallInfo",
    "ToolCallRequestBlock",
    "ToolCallResult",
    "ToolContext",
    "ToolDefinitionError",
    "ToolResultMessage",
    "TurnInfo",
    "UnknownAgentError",
    "UnknownProviderError",
    "UserMessage",
    "current_environment",
    "script",
    "system",
    "tool",
    "tool_request",
    "user",
]
