"""The agent actor's half of consume at acceptance (``actors.consume_claim``): publishing its
idle loop's offer as a claim, withdrawing it before the loop is fed, and feeding a taken
claim's outcome. :class:`ClaimSlot` is a part the actor owns, one per incarnation.

Invariant kept: at most one claim is published at a time, only while the loop is idle, and a
claim is withdrawn (its outcome fed first) before the loop sees any other event, so the loop
sees a consumption land before anything after it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentkeep.actors.consume_claim import ConsumeClaim, ConsumedHere
from agentkeep.loop.effects import LifecycleIds
from agentkeep.loop.events import AcceptanceOutcomeUnknown, ConsumedAtAcceptance, Event, Start

if TYPE_CHECKING:
    from agentkeep.actors.plan_hooks import ConsumptionPolicy
    from agentkeep.actors.status import AgentStatus
    from agentkeep.loop.machine import AgentLoop


class ClaimSlot:
    """One incarnation's published claim (None while running or without an offer).

    Args:
        core: The incarnation's loop (asked for its offer).
        status: The agent's status, which shows the claim to acceptances and passivation.
        consumption: The consumption policy a claim's commit runs (told the run's ids).
        take: Feeds a mailbox message to the loop as the actor would (a taken claim's outcome).
        feed: Feeds one event to the loop (a run started from a consumption in the store).
    """

    def __init__(
        self,
        core: AgentLoop,
        status: AgentStatus,
        consumption: ConsumptionPolicy,
        *,
        take: Callable[[Any], None],
        feed: Callable[[Event], None],
    ) -> None:
        self._core = core
        self._status = status
        self._consumption = consumption
        self._take = take
        self._feed = feed
        self._claim: ConsumeClaim | None = None
        self._incarnation = object()  # what a claim this incarnation fed names

    def publish(self) -> None:
        """Idle, with an offer from the loop: publish a claim an acceptance may take."""
        if self._claim is not None or self._core.running:
            return
        offer = self._core.offer()
        if offer is not None:
            # The consumption's transactional hooks are told the run's loop and turn, as
            # the run's own consumption commit would tell them (docs/lifecycle.md).
            owed = offer.send.owed
            ids = LifecycleIds(loop_id=owed.loop_id, turn_id=owed.turn_id)
            self._claim = ConsumeClaim(offer, self._consumption.with_ids(ids))
            self._status.claim = self._claim

    def withdraw(self, *, feed: bool = True) -> None:
        """Withdraw the published claim; feed a taken one's outcome to the loop (unless
        stopping: a taken claim's ``ClaimTold`` then starts the next incarnation)."""
        claim, self._claim = self._claim, None
        if claim is None:
            return
        try:
            outcome = claim.withdraw(wait=feed)
            if not feed:
                return
            if isinstance(outcome, ConsumedHere):
                claim.fed_by = self._incarnation
                self._take(ConsumedAtAcceptance(plan=outcome.plan, value=outcome.value))
            elif outcome == "unknown":
                self._take(AcceptanceOutcomeUnknown())
        finally:
            # Only now (the run it started is under way): until then a passivation finds
            # the taken claim and leaves the actor be (AgentTier._passivate).
            if self._status.claim is claim:
                self._status.claim = None

    def told(self, claim: ConsumeClaim) -> None:
        """An acceptance consumed under ``claim`` (a counted signal). If this incarnation fed
        its outcome (when it withdrew it), nothing is left to do; otherwise (another
        incarnation's claim, or an outcome it could not wait for) the store holds the
        consumption, and a run starts from it."""
        try:
            if claim is self._claim:
                self.withdraw()  # its outcome is fed now
            if claim.fed_by is not self._incarnation:
                self._feed(Start())
        except BaseException:
            self._status.set_running(True)  # crashed with work unfinished (as in _take)
            raise
        finally:
            self._status.signal_taken()
