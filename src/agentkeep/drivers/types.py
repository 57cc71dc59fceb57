"""The injected-driver API (the wire's ``AgentDriver``): what a driver is, what it is given
and what it returns (docs/drivers.md); what it may raise or be refused is in
:mod:`~agentkeep.drivers.errors`.

A driver runs the turns of the sessions whose pinned revision names it (``driver.id``). It is
registered at ``AgentSystem.open(drivers=[...])`` and called once per turn, in a child actor's
thread, never in an agent's own thread; it gets no store handle: everything durable it does
goes through its :class:`~agentkeep.drivers.context.DriverContext`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

import msgspec

from agentkeep.registry.types import Revision
from agentkeep.sessions.types import SessionRecord
from agentkeep.types import JSONObject
from agentkeep.types.turns import TurnRecord

if TYPE_CHECKING:
    from agentkeep.drivers.context import DriverContext


class DriverRunRequest(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """What a driver's ``run`` is given for one turn (the wire's ``DriverRunRequest``).

    Attributes:
        revision: The session's pinned (immutable) revision: instructions, model, driver
            config, … as they were when the session started.
        session: The session as it stands when the turn starts.
        turn: The turn, already ``running``.
        history: The ordered completed history before this turn: for each earlier
            ``completed`` turn, its input then the assistant messages it produced (its
            ``message`` events), each a wire ``AgentMessage`` as JSON (``{"role",
            "parts"}``: text, reference and data parts).
        input: The turn's input message (``turn.input``), an ``AgentMessage`` as JSON.
        driver_session_id: The opaque id the last turn that returned one gave, or None
            (the wire's ``driverSessionId``).
    """

    revision: Revision
    session: SessionRecord
    turn: TurnRecord
    history: tuple[JSONObject, ...]
    input: JSONObject
    driver_session_id: str | None

    @property
    def agent(self) -> Revision:
        """The pinned revision under its wire name (``request.agent``)."""
        return self.revision


class DriverResult(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """What a driver's ``run`` returns (the wire's ``DriverRunResult``); returning None is
    the same as ``DriverResult()``, and a plain dict ``{"message", "driverSessionId",
    "metadata"}`` (each optional) is taken as one.

    Attributes:
        message: The final assistant ``AgentMessage`` (``{"role": "assistant", "parts":
            [{"type": "text", "text": ...}]}``), appended once as a ``message`` event before
            the turn completes; None: none.
        driver_session_id: Replaces the session's opaque driver session id; None keeps it.
        metadata: A JSON object kept in the turn's result.
    """

    message: JSONObject | None = None
    driver_session_id: str | None = None
    metadata: JSONObject = msgspec.field(default_factory=dict)


@runtime_checkable
class Driver(Protocol):
    """An injected driver (the wire's ``AgentDriver``).

    Attributes:
        id: What a definition's ``driver.id`` names to select it (not ``agentkeep``, which is
            the native durable loop).
    """

    id: str

    def run(
        self, request: DriverRunRequest, context: DriverContext
    ) -> DriverResult | JSONObject | None:
        """Run one turn; return its result (a :class:`DriverResult`, the wire's
        ``DriverRunResult`` as a dict, or None), or raise to fail it.

        Called in a worker thread with the turn already ``running``. Observe
        ``context.cancelled`` (or ``raise_if_cancelled``) and stop promptly when it is set:
        a run that ignores it is abandoned after the grace and its later emits refused.
        """
        ...


__all__ = [
    "Driver",
    "DriverResult",
    "DriverRunRequest",
]
