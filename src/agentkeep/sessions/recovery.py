"""What opening a store does to the turns the previous process left live (docs/turns.md).

- A native turn (the ``agentkeep`` driver) that is ``queued`` or ``running`` is left alone:
  the loop resumes exactly where it stopped, so the turn ends as if nothing had happened.
- A native turn that is ``cancelling`` becomes ``cancelled``: its cancellation was asked and
  durable; whatever the resumed loop still owes belongs to no turn.
- Any other driver's live turn becomes ``interrupted`` (docs/drivers.md's crash rule): its driver
  may have done external work before the crash, so it is never guessed at and never replayed.

All of it in one transaction, before any agent starts. A partition's system (``partition``)
moves only its own partition's turns: another partition's are its owner's, live or not.
"""

from __future__ import annotations

from agentkeep.partitions import Partition
from agentkeep.persistence.interface import Transaction
from agentkeep.types.turns import NATIVE_DRIVER, TurnFailure, TurnRecord

#: Why an injected driver's turn was interrupted.
INTERRUPTED = TurnFailure(
    code="interrupted",
    message="The process running this turn stopped before it ended; it is not replayed.",
)
#: Why a native turn whose cancellation was asked ended cancelled at startup.
CANCELLED_AT_RESTART = TurnFailure(
    code="cancelled", message="Cancelled; the process stopped before the cancellation landed."
)


def needs_recovery(tx: Transaction, partition: Partition | None = None) -> bool:
    """True if a live turn is one :func:`recover_turns` moves (read first, so an open with
    nothing to recover writes nothing)."""
    return any(_moves(turn) for turn in _live(tx, partition))


def _live(tx: Transaction, partition: Partition | None) -> list[TurnRecord]:
    live = tx.turns.all_live()
    if partition is None:
        return live
    return [turn for turn in live if partition.owns(turn.session_id)]


def _moves(turn: TurnRecord) -> bool:
    return turn.driver != NATIVE_DRIVER or turn.status == "cancelling"


def recover_turns(tx: Transaction, partition: Partition | None = None) -> list[TurnRecord]:
    """Apply the module's rules to every live turn (of ``partition``); returns the turns
    moved."""
    moved: list[TurnRecord] = []
    for turn in _live(tx, partition):
        if turn.driver != NATIVE_DRIVER:
            moved.append(tx.turns.move(turn.session_id, turn.id, "interrupted", error=INTERRUPTED))
        elif turn.status == "cancelling":
            moved.append(
                tx.turns.move(turn.session_id, turn.id, "cancelled", error=CANCELLED_AT_RESTART)
            )
    return moved
