"""Sessions: agentkeep agents started from a definition's revision, pinned to it.

The wire calls one durable conversation a *session*; in agentkeep it is an agent, and the
session id is the agent id (``docs/sessions.md``). Agents created without a definition are
sessions too, so the surfaces see everything.

- :mod:`~agentkeep.sessions.types`: :class:`SessionRecord` (the wire's ``AgentSession``);
- :mod:`~agentkeep.sessions.errors`: what is refused;
- :mod:`~agentkeep.sessions.setup`: what a revision configures, checked at start;
- :mod:`~agentkeep.sessions.tables`: the ``sessions`` table, inside a store transaction;
- :mod:`~agentkeep.sessions.turning`: sending, reading, waiting for and cancelling turns;
- :mod:`~agentkeep.sessions.owing`: the work owed that no turn holds, and every busy state's
  way out;
- :mod:`~agentkeep.sessions.service`: :class:`Sessions` (``AgentSystem.sessions``).
"""

from agentkeep.sessions.errors import (
    SessionBusyError,
    SessionConfigError,
    SessionError,
    UnknownSessionError,
    UnknownTurnError,
    UnsupportedDriverError,
)
from agentkeep.sessions.service import Sessions
from agentkeep.sessions.turning import TurnHandle
from agentkeep.sessions.types import SessionOwes, SessionRecord, SessionStatus

__all__ = [
    "SessionBusyError",
    "SessionConfigError",
    "SessionError",
    "SessionOwes",
    "SessionRecord",
    "SessionStatus",
    "Sessions",
    "TurnHandle",
    "UnknownSessionError",
    "UnknownTurnError",
    "UnsupportedDriverError",
]
