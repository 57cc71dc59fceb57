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

The package exports the wire's session surface: :class:`Sessions`, its records and errors, the
wire values a turn carries (:class:`TurnRecord`, :class:`TurnFailure`, :class:`WireMessage` and
its parts), the ledger's :class:`SessionEvent`, and :class:`Subscription`
(``AgentSystem.subscribe``).
"""

from agentkeep.errors import EventTooLargeError, InputTooLargeError
from agentkeep.persistence.ledger.subscription import Subscription
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
from agentkeep.types.ledger import SessionEvent
from agentkeep.types.parts import DataPart, ReferencePart, TextPart, WireMessage
from agentkeep.types.turns import TurnFailure, TurnRecord

__all__ = [
    "DataPart",
    "EventTooLargeError",
    "InputTooLargeError",
    "ReferencePart",
    "SessionBusyError",
    "SessionConfigError",
    "SessionError",
    "SessionEvent",
    "SessionOwes",
    "SessionRecord",
    "SessionStatus",
    "Sessions",
    "Subscription",
    "TextPart",
    "TurnFailure",
    "TurnHandle",
    "TurnRecord",
    "UnknownSessionError",
    "UnknownTurnError",
    "UnsupportedDriverError",
    "WireMessage",
]
