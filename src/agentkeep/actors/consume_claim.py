"""Consume at acceptance, the threads' half: the one-shot claim through which an idle agent
actor hands its loop's ``ConsumeOffer`` to the acceptance that wakes it (``loop.offers``).

An idle actor publishes a claim (``AgentStatus.claim``). An acceptance's transaction, on the
writer's thread, may :meth:`~ConsumeClaim.take` it — atomically, so of the acceptance and the
actor exactly one owns it — and consume under its offer; the accepting caller then
:meth:`~ConsumeClaim.resolve` s it with what happened once the transaction's outcome is known,
and tells the actor (``ClaimTold``). Before the actor takes any message it
:meth:`~ConsumeClaim.withdraw` s its claim: a claim nobody took is simply gone; a taken one
is waited for (as long as the transaction runs: the actor would otherwise be waiting on its
own consumption commit) and its outcome is fed to the loop first, so the loop sees the
consumption land before anything that happened after it.

Locking: one lock per claim, a leaf; the wait is on an event set after the lock is released.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol, TypeAlias, TypeVar

from agentkeep.actors.latch import Latch
from agentkeep.errors import CommitOutcomeUnknownError
from agentkeep.logs import get_logger
from agentkeep.loop.plans import Consumed, ConsumeOffer, ConsumeQueue
from agentkeep.persistence.interface import Transaction
from agentkeep.runtime import plan_ports
from agentkeep.runtime.offered_consumption import consume_offered
from agentkeep.types.records import QueuedMessage

log = get_logger(__name__)

#: How long a withdrawing actor waits for a taken claim's outcome before it trusts nothing
#: it remembers (the outcome then counts as unknown: the loop reloads from the store).
WITHDRAW_WAIT_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class ConsumedHere:
    """The acceptance committed with its consumption."""

    plan: ConsumeQueue
    value: Consumed


#: ``declined``: nothing was consumed (the acceptance committed alone, or not at all);
#: ``unknown``: the commit's outcome is unknown (it may have consumed).
ClaimOutcome: TypeAlias = ConsumedHere | Literal["declined", "unknown"]


class ConsumeClaim:
    """One offer of one actor incarnation, taken at most once.

    Args:
        offer: The loop's offer (``AgentLoop.offer``).
        policy: The actor's consumption policy (its hooks run in the taking transaction).
    """

    def __init__(self, offer: ConsumeOffer, policy: plan_ports.ConsumptionPolicy) -> None:
        self.offer = offer
        self.policy = policy
        self._lock = threading.Lock()
        self._state: Literal["open", "taken", "withdrawn", "resolved"] = "open"
        self._outcome: ClaimOutcome = "declined"
        self._resolved = Latch()  # set once, by ``resolve`` (the state moved to resolved)
        # The incarnation (its token) that fed a ``ConsumedHere`` outcome to its loop: the
        # ``ClaimTold`` that follows has nothing left to do there; any other incarnation (the
        # feeder stopped meanwhile) must start a run from the store.
        self.fed_by: object | None = None

    @property
    def open(self) -> bool:
        """Whether nobody has taken or withdrawn the claim yet (it may change at once)."""
        return self._state == "open"

    def take(self) -> bool:
        """Take the claim for one acceptance (in its transaction); False if it is gone."""
        with self._lock:
            if self._state != "open":
                return False
            self._state = "taken"
            return True

    def retire(self) -> bool:
        """Withdraw the claim unless an acceptance took it (from outside the actor: its
        passivation); False if one did — the agent has work coming."""
        with self._lock:
            if self._state == "open":
                self._state = "withdrawn"
            return self._state == "withdrawn"

    def resolve(self, outcome: ClaimOutcome) -> None:
        """What the taking acceptance's transaction did, once its outcome is known."""
        with self._lock:
            if self._state != "taken":
                return
            self._state = "resolved"
            self._outcome = outcome
        self._resolved.set()

    def withdraw(self, *, wait: bool = True) -> ClaimOutcome:
        """Withdraw the claim: ``declined`` if nobody took it; if an acceptance did, its
        outcome — waited for (up to ``WITHDRAW_WAIT_SECONDS``; then ``unknown``) unless
        ``wait`` is False (then ``unknown``: the agent's next incarnation reloads)."""
        with self._lock:
            if self._state == "open":
                self._state = "withdrawn"
                return "declined"
            if self._state == "withdrawn":
                return "declined"
        if not wait or not self._resolved.wait(WITHDRAW_WAIT_SECONDS):
            return "unknown"
        with self._lock:
            return self._outcome


@dataclass(frozen=True, slots=True)
class ClaimTold:
    """The actor's mailbox message after an acceptance consumed under ``claim`` (counted, like
    ``WorkAccepted``). The incarnation that fed the outcome (when it withdrew the claim) has
    nothing left to do; any other continues from the store."""

    claim: ConsumeClaim


T = TypeVar("T")


class _Transacting(Protocol):
    def transact(self, work: Callable[[Transaction], T]) -> T: ...


def accept_consuming(
    store: _Transacting,
    agent_id: str,
    claim: ConsumeClaim,
    accept: Callable[[Transaction], tuple[T, QueuedMessage | None]],
    finish: Callable[[Transaction, T], T] | None = None,
) -> tuple[T, QueuedMessage | None, bool] | None:
    """Run the acceptance ``accept`` in a transaction that, if it queued a message and takes
    ``claim``, consumes it there too (``runtime.offered_consumption``). Returns ``accept``'s
    value (passed through ``finish`` last in the transaction, when given: what the value
    reads then includes the consumption) and whether the message was consumed (then the
    actor must be told ``ClaimTold``); None if the consumption raised — the whole
    transaction rolled back, nothing of it is durable, and the caller commits the acceptance
    alone, as without a claim.

    The claim is resolved before this returns or raises, whatever happened.

    Raises:
        CommitOutcomeUnknownError: the commit's outcome is unknown (the claim: ``unknown``).
        Exception: whatever the acceptance (or the store) raised (the claim: ``declined``).
    """
    taken = False
    consumption_failed = False

    def work(tx: Transaction) -> tuple[T, QueuedMessage | None, Consumed | None]:
        nonlocal taken, consumption_failed
        # The owed fact before the acceptance writes its own (only worth reading while the
        # claim can still be taken).
        owed_before = tx.facts.read_owed(agent_id) if claim.open else None
        value, queued = accept(tx)
        consumed = None
        if queued is not None and claim.take():
            taken = True
            try:
                consumed = consume_offered(
                    tx, agent_id, claim.offer, queued, owed_before=owed_before, policy=claim.policy
                )
            except Exception:
                consumption_failed = True
                raise
        return (value if finish is None else finish(tx, value)), queued, consumed

    try:
        value, queued, consumed = store.transact(work)
    except CommitOutcomeUnknownError:
        if taken:
            claim.resolve("unknown")
        raise
    except BaseException as error:
        if taken:
            # An error from the store means nothing of it committed; anything else (an
            # interrupt while waiting) says nothing of the transaction still under way.
            claim.resolve("declined" if isinstance(error, Exception) else "unknown")
        if consumption_failed and isinstance(error, Exception):
            log.warning("consume_at_acceptance_failed", agent_id=agent_id, error=repr(error))
            return None
        raise
    if not taken:
        return value, queued, False
    if consumed is None or queued is None:
        claim.resolve("declined")
        return value, queued, False
    claim.resolve(ConsumedHere(plan=claim.offer.plan(queued.queue), value=consumed))
    return value, queued, True
