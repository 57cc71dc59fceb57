"""Today's ``send``, ``steer`` and ``abort`` when a daemon owns the home: the same result
fields as the direct path, reached through the daemon's REST API.

Directly, these commands open the store (which a daemon holds, so they used to exit 3). Under
a daemon the message becomes a turn of the session (session id = agent id): ``--id`` is its
idempotency key, ``id`` in the result is that key (or the turn's own), and the daemon runs
the turn at once (so a queued message's ``state`` is ``running``, not ``owes_work``).
``abort`` cancels the active turn and waits for it to stop. ``--model``/``--provider`` need
the store itself (exit 2).
"""

from __future__ import annotations

from typing import Any

from agentkeep.cli.context import CliState
from agentkeep.cli.output import EXIT_BAD_INPUT, CliError
from agentkeep.cli.transport import open_backend
from agentkeep.cli.turn_waiting import finish_quietly
from agentkeep.delivery import DeliveryKind
from agentkeep.errors import TurnStateError
from agentkeep.mcp.tools import answer_of


def refuse_options(model: str | None, provider: str | None) -> None:
    """``--model``/``--provider`` change the agent's settings: only the store's owner can."""
    if model is not None or provider is not None:
        raise CliError(
            "--model and --provider cannot be used while a daemon owns the state directory.",
            code="daemon_owns_home",
            hint="Send without them, or stop the daemon first.",
            exit_code=EXIT_BAD_INPUT,
        )


def deliver(
    state: CliState,
    delivery: DeliveryKind,
    agent_id: str,
    message: str,
    *,
    message_id: str | None,
    wait: bool,
    timeout_seconds: float,
) -> dict[str, Any]:
    """Send through the daemon; the legacy result (``agent_id``, ``id``, ``delivery``,
    ``created``, ``waited``, ``state``, ``answer``)."""
    with open_backend(state) as backend:
        sent = backend.send(
            agent_id, message, delivery=delivery, idempotency_key=message_id, metadata=None
        )
        turn = sent.turn
        if wait:
            turn = finish_quietly(state, backend, turn, timeout_seconds=timeout_seconds)
    return {
        "agent_id": agent_id,
        # --id as given; else the turn's key (a steer joins the running turn: that turn's key).
        "id": message_id if message_id is not None else turn.idempotency_key,
        "delivery": "steering" if delivery == "steer" else "send",
        "created": not sent.duplicate,
        "waited": wait,
        "state": "idle" if turn.terminal else "running",
        "answer": answer_of(turn) if wait else None,
    }


def abort(state: CliState, agent_id: str) -> dict[str, Any]:
    """Cancel the agent's active turn through the daemon; the legacy result."""
    with open_backend(state) as backend:
        backend.get_session(agent_id)  # an unknown agent is exit 4, not "nothing to abort"
        try:
            turn = backend.cancel_turn(agent_id, None)
        except TurnStateError:
            return {"agent_id": agent_id, "aborted": False, "state": "idle"}
    return {
        "agent_id": agent_id,
        "aborted": True,
        "state": "idle" if turn.terminal else "running",
    }
