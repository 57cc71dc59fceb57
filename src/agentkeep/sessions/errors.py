"""What starting, reading or archiving a session refuses, each error naming what was wrong.

All derive from :class:`agentkeep.errors.AgentkeepError` with a stable ``code`` (the REST and
MCP surfaces map them: config → 422, busy → 409, unknown → 404).
"""

from __future__ import annotations

from collections.abc import Iterable

from agentkeep.errors import AgentkeepError, UnknownAgentError


class SessionError(AgentkeepError):
    """A session could not be started, read or changed as asked."""

    code = "session_error"


class SessionConfigError(SessionError):
    """The revision a session would start from cannot configure it (an unknown tool id, a
    provider that is not registered, a model setting agentkeep does not know); ``field``
    names the definition's field (wire names, e.g. ``toolbox.toolIds[1]``). Nothing was
    written."""

    code = "invalid_session_config"

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class UnsupportedDriverError(SessionConfigError):
    """The revision names a driver this system cannot run: neither ``agentkeep`` (the native
    durable loop) nor one registered at ``AgentSystem.open(drivers=...)``."""

    code = "unsupported_driver"

    def __init__(self, driver_id: str, available: Iterable[str] = ()) -> None:
        names = ", ".join(f'"{name}"' for name in ["agentkeep", *sorted(available)])
        super().__init__(
            "driver.id",
            f'driver "{driver_id}" is not registered in this system (it runs {names}; '
            "register injected drivers with AgentSystem.open(drivers=[...]), or "
            "`agentkeep --drivers` / $AGENTKEEP_DRIVERS for the CLI, serve and mcp)",
        )
        self.driver_id = driver_id


class UnknownSessionError(UnknownAgentError, SessionError):
    """No session (agent) has this id, or it was deleted. A session id is its agent's id, so
    this is also an :class:`~agentkeep.errors.UnknownAgentError`."""

    code = "unknown_session"

    def __init__(self, session_id: str) -> None:
        super().__init__(session_id)
        self.args = (f'Session "{session_id}" does not exist.',)
        self.session_id = session_id


class SessionBusyError(SessionError):
    """The session is busy — a live turn, or work owed that no turn holds — so it cannot be
    archived (or settled) now. ``state`` names what keeps it busy and the command that gets
    out of it (``agentkeep session cancel`` for a live turn, ``agentkeep session settle``
    for owed work no turn holds)."""

    code = "session_busy"

    def __init__(
        self, session_id: str, state: str | None = None, *, doing: str = "archived"
    ) -> None:
        why = state or "it is running"
        super().__init__(f'Session "{session_id}" cannot be {doing} now: {why}.')
        self.session_id = session_id
        self.state = why


class UnknownTurnError(SessionError):
    """The session has no turn with this id."""

    code = "unknown_turn"

    def __init__(self, session_id: str, turn_id: str) -> None:
        super().__init__(f'Session "{session_id}" has no turn "{turn_id}".')
        self.session_id = session_id
        self.turn_id = turn_id
