"""What the MCP tools themselves refuse (the backend's refusals are the library's errors).

Every error a tool raises that derives from :class:`~agentkeep.errors.AgentkeepError` reaches
the client as a tool error (``isError``) whose text is ``code: message``, so the model reads
what was wrong and can fix its call.
"""

from __future__ import annotations

from agentkeep.errors import AgentkeepError


class McpToolError(AgentkeepError):
    """A tool call could not be done as asked."""

    code = "mcp_tool_error"


class InvalidArgumentsError(McpToolError):
    """A tool's arguments are missing, unknown, of the wrong type, or contradict each other
    (a field and its legacy name with different values)."""

    code = "invalid_arguments"


class SessionMismatchError(McpToolError):
    """``talk_to_agent`` named a session and an agent, and the session is not the agent's."""

    code = "session_mismatch"

    def __init__(self, session_id: str, definition_id: str | None, agent_id: str) -> None:
        owner = f'agent "{definition_id}"' if definition_id else "no agent definition"
        super().__init__(
            f'Session "{session_id}" belongs to {owner}, not to agent "{agent_id}"; leave out '
            "agent_id to continue it, or leave out session_id to start a new session."
        )
        self.session_id = session_id
        self.agent_id = agent_id


class TurnTimeoutError(McpToolError):
    """The turn was accepted but not finished within the wait; it goes on running."""

    code = "timeout"

    def __init__(self, session_id: str, turn_id: str, timeout_seconds: float) -> None:
        super().__init__(
            f'Turn "{turn_id}" of conversation "{session_id}" is still running after '
            f"{timeout_seconds:g} s. It continues: read its answer later with "
            f'agents_get_conversation (conversation_id "{session_id}"), or cancel it with '
            "cancel_turn."
        )
        self.session_id = session_id
        self.turn_id = turn_id
