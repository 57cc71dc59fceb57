"""What a driver may raise or be refused (docs/drivers.md): :class:`DriverError` and its kinds.

Below both the driver API (:mod:`~agentkeep.drivers.types`) and the context that raises most
of them (:mod:`~agentkeep.drivers.context`).
"""

from __future__ import annotations

from agentkeep.errors import AgentkeepError


class DriverError(AgentkeepError):
    """A driver was misused, refused, or stopped."""

    code = "driver_error"


class DriverCancelledError(DriverError):
    """Raised by ``DriverContext.raise_if_cancelled`` once the turn was cancelled or timed
    out (a driver may let it escape: the turn ends ``cancelled`` or ``failed`` as decided)."""

    code = "cancelled"


class InvalidDriverEventError(DriverError):
    """A driver emitted an event agentkeep refuses (a reserved or empty type, data that is
    not a JSON object, over ``max_event_bytes``, a ``message`` that is not an assistant
    message); nothing was written and the turn fails with ``error.code = "invalid_event"``."""

    code = "invalid_event"


class DriverContextClosedError(DriverError):
    """The run this context belongs to is over (it returned, raised, timed out or was
    abandoned): nothing it emits now is written."""

    code = "driver_context_closed"


__all__ = [
    "DriverCancelledError",
    "DriverContextClosedError",
    "DriverError",
    "InvalidDriverEventError",
]
