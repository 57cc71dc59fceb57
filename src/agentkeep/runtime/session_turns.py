"""How the native loop's transactions move its session's turns (docs/turns.md).

Each function runs inside the transaction of the loop fact that causes the move, so a turn's
status and the fact it reports commit together or not at all:

- a queued message consumed into the conversation starts its turn (``running``);
- a response that answers (it ended without calling a tool) completes every running turn
  whose input is all consumed — a steer that joined a turn and still waits keeps it running,
  so the turn ends only with the answer that saw all of its input; a turn whose cancellation
  was asked (``cancelling``) becomes ``cancelled`` instead;
- a failure note (the loop gave up on a response) fails the running turns; the runtime still
  owes the answer (the next start answers it), but the turn's outcome is final;
- an abort makes the running turns ``cancelling`` before the loop hears of it, and they are
  ``cancelled`` when the aborted work has stopped, when the run settles, or by the next
  answer — whichever commits first. In the same transaction the input a steer joined to
  such a turn and that is still queued leaves the queue (:func:`unqueue_inputs`): a cancelled
  turn's input never runs afterwards as work that belongs to no turn.

A crash between these transactions leaves the turn ``queued`` or ``running``: the native loop
resumes exactly where it stopped, so its turns are never interrupted.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentkeep.persistence.interface import Transaction
from agentkeep.types import AssistantBlock
from agentkeep.types.parts import assistant_json
from agentkeep.types.turns import NATIVE_DRIVER, TurnFailure, TurnRecord

#: The failure code of a native turn whose response failed past its retries.
INFERENCE_FAILED = "inference_failed"
#: Why a running native turn was cancelled (an abort, or ``Sessions.cancel``).
CANCELLED = TurnFailure(code="cancelled", message="Cancelled while it ran.")


def consumed(tx: Transaction, agent_id: str, message_id: str) -> None:
    """The queued message ``message_id`` entered the conversation: its turn runs."""
    turn = tx.turns.of_message(agent_id, message_id)
    if turn is not None and turn.status == "queued" and turn.driver == NATIVE_DRIVER:
        tx.turns.move(agent_id, turn.id, "running")


def answered(tx: Transaction, agent_id: str, answer: Sequence[AssistantBlock]) -> None:
    """A response answered: complete (or, if asked, cancel) the turns it answers."""
    message = assistant_json(answer)
    for turn in _native(tx, agent_id):
        if tx.turns.inputs_queued(agent_id, turn.id):
            continue
        if turn.status == "cancelling":
            tx.turns.move(agent_id, turn.id, "cancelled")
        else:
            tx.turns.move(agent_id, turn.id, "completed", result={"message": message})


def failed(tx: Transaction, agent_id: str, reason: str) -> None:
    """The loop gave up on a response (its failure note is appended in this transaction)."""
    error = TurnFailure(code=INFERENCE_FAILED, message=reason)
    for turn in _native(tx, agent_id):
        if turn.status == "cancelling":
            tx.turns.move(agent_id, turn.id, "cancelled")
        elif turn.status == "running":
            tx.turns.move(agent_id, turn.id, "failed", error=error)


def cancelling(tx: Transaction, agent_id: str) -> bool:
    """An abort is asked: the running turns become ``cancelling`` (the intent is durable
    before the loop hears of it), and the input steers joined to them that still waits
    leaves the queue; True if some did (the loop's mirror of the queue is behind)."""
    took_back = False
    for turn in _native(tx, agent_id):
        if turn.status == "running":
            took_back = unqueue_inputs(tx, agent_id, turn.id) or took_back
            tx.turns.move(agent_id, turn.id, "cancelling")
    return took_back


def unqueue_inputs(tx: Transaction, agent_id: str, turn_id: str) -> bool:
    """Take the turn's inputs that still wait in the queue out of it (a queued turn's own
    message, or the steers that joined a running one); True if every one of them was still
    waiting and is gone now (a queued turn none of whose input was consumed yet), False if
    none waited. The queue delete is the claim: of this and the loop's consumption, exactly
    one takes each entry."""
    mine = set(tx.turns.message_ids(agent_id, turn_id))
    waiting = [m for m in tx.queue.messages(agent_id) if m.id in mine]
    if not waiting:
        return False
    return all(tx.queue.dequeue(agent_id, m.queue, m.seq) for m in waiting)


def cancelled(tx: Transaction, agent_id: str) -> None:
    """The aborted work stopped: ``cancelling`` turns are ``cancelled``."""
    for turn in _native(tx, agent_id):
        if turn.status == "cancelling":
            tx.turns.move(agent_id, turn.id, "cancelled", error=CANCELLED)


def settled(tx: Transaction, agent_id: str) -> None:
    """The run settled (nothing is queued or owed): a turn still live was aborted — the
    answer that would have ended it will not come — so it is ``cancelled`` (an abort that did not
    mark it ``cancelling`` first ends here)."""
    for turn in _native(tx, agent_id):
        if turn.status in ("running", "cancelling"):
            if turn.status == "running":
                tx.turns.move(agent_id, turn.id, "cancelling")
            tx.turns.move(agent_id, turn.id, "cancelled", error=CANCELLED)


def _native(tx: Transaction, agent_id: str) -> list[TurnRecord]:
    # The started turns (every move here is of a running or cancelling turn: a queued one
    # waits for its message), and only the native loop's own: an injected driver's turns
    # move by its runner.
    return [t for t in tx.turns.started(agent_id) if t.driver == NATIVE_DRIVER]
