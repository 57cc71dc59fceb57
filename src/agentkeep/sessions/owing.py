"""What a session owes that no live turn holds, and the way out of each busy state
(docs/turns.md, "Owed work no turn holds").

Three views must agree on a session: its turns, its owed work, and whether it can be
archived. Work the runtime owes is either held by a live turn (``queued``, ``running``,
``cancelling``: cancelling that turn ends it) or by none — a failed turn's question the
runtime would still answer, or work a restart would resume. The latter is shown on the
session (:func:`owes`, ``SessionRecord.owes``) and ended by ``Sessions.settle``. Every
refusal that a busy session causes names its state and the command that gets out of it
(:func:`busy_state`).
"""

from __future__ import annotations

from agentkeep.persistence.interface import Transaction
from agentkeep.sessions.types import SessionOwes


def owes(tx: Transaction, session_id: str) -> SessionOwes | None:
    """The work ``session_id`` owes that no live turn holds, or None."""
    owed = tx.facts.read_owed(session_id)
    if owed is None or tx.turns.live(session_id):
        return None
    last = tx.turns.last(session_id)
    if last is not None and last.status == "failed":
        problem = last.error.message if last.error is not None else "no reason given"
        return SessionOwes(
            stage=owed.stage,
            reason=f"turn {last.number} failed ({problem}); its question is still owed an answer",
            turn_id=last.id,
        )
    return SessionOwes(
        stage=owed.stage,
        reason=f"work no turn holds is owed (stage {owed.stage}); a start or restart resumes it",
    )


def settle_hint(session_id: str) -> str:
    """How to end owed work no turn holds, on every surface."""
    return (
        f"end it with `agentkeep session settle {session_id}` "
        f"(POST /v1/sessions/{session_id}/settle, Sessions.settle, MCP settle_session)"
    )


def cancel_hint(session_id: str) -> str:
    """How to cancel a session's live turn, on every surface."""
    return (
        f"cancel it with `agentkeep session cancel {session_id}` "
        f"(POST /v1/sessions/{session_id}/cancel, Sessions.cancel, MCP cancel_turn)"
    )


def live_state(tx: Transaction, session_id: str) -> str | None:
    """The session's live turn, with the way out, or None if it has none."""
    live = tx.turns.live(session_id)
    if not live:
        return None
    started = [t for t in live if t.status != "queued"]
    turn = started[-1] if started else live[0]
    more = f" ({len(live)} live turns)" if len(live) > 1 else ""
    return f"turn {turn.number} is {turn.status}{more}: wait for it, or {cancel_hint(session_id)}"


def busy_state(tx: Transaction, session_id: str) -> str | None:
    """What keeps the session busy, with the way out, or None if nothing durable does."""
    live = live_state(tx, session_id)
    if live is not None:
        return live
    owed = owes(tx, session_id)
    if owed is not None:
        return f"it owes work no turn holds ({owed.reason}): {settle_hint(session_id)}"
    return None
