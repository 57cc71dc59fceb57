"""Consume at acceptance, the transaction's half: run an idle loop's offered consumption
(``loop.offers``) inside the transaction that accepted the message — only if the store, read
inside that transaction, is exactly what the loop's reload would have read.

The consumption itself is :func:`commit_plans.execute` of the offer's ``ConsumeQueue``, so it
commits exactly what the loop's own consumption commit would have: the same claim of the
queue entry, the turn's move to ``running``, the user record with its event, the settings and
the owed inference, and the same transactional hooks (``message_accepted_transact``,
``permission_mode_changed_transact``, ``model_changed``) through the loop's
``ConsumptionPolicy``, on the writer's thread. A hook that raises rolls the whole transaction
back; the caller then commits the acceptance alone (``AgentSystem`` delivery).
"""

from __future__ import annotations

from agentkeep.loop.plans import Consumed, ConsumeOffer
from agentkeep.persistence.interface import Transaction
from agentkeep.runtime import commit_plans, plan_ports
from agentkeep.types.records import OwedWork, QueuedMessage


def consume_offered(
    tx: Transaction,
    agent_id: str,
    offer: ConsumeOffer,
    entry: QueuedMessage,
    *,
    owed_before: OwedWork | None,
    policy: plan_ports.ConsumptionPolicy,
) -> Consumed | None:
    """Consume ``entry`` (just accepted in ``tx``) under ``offer``; None (nothing written) if
    the durable state is not the one the offer was made from. Raises what the consumption
    raised (the caller rolls ``tx`` back).

    ``owed_before``: the owed fact as read in ``tx`` before the acceptance wrote its own.
    """
    if not _as_offered(tx, agent_id, offer, entry, owed_before):
        return None
    plan = offer.plan(entry.queue)
    value = plan.committed(commit_plans.execute(tx, agent_id, plan, policy))
    if not value.records or value.outranked:
        # Cannot be (the check above saw the entry alone in its queue); refuse rather than
        # tell the loop of a consumption it would not have made. (``remaining`` may hold
        # what a hook queued in this transaction: the loop mirrors it, as after its own.)
        raise LookupError(f"message {entry.id!r} was not consumed alone at its acceptance")
    return value


def _as_offered(
    tx: Transaction,
    agent_id: str,
    offer: ConsumeOffer,
    entry: QueuedMessage,
    owed_before: OwedWork | None,
) -> bool:
    """What the loop's reload reads (``commit_plans.load_snapshot``), against its mirror: the
    accepted entry queued alone, nothing else owed, noticed or pending, and the same record
    count (the same test a reload without records makes), settings and context size."""
    if owed_before is not None:
        return False
    queued = tx.queue.messages(agent_id)
    if len(queued) != 1 or queued[0].seq != entry.seq or queued[0].queue != entry.queue:
        return False
    if tx.queue.notices(agent_id) or tx.calls.pending(agent_id):
        return False
    if tx.records.count(agent_id) != offer.record_count:
        return False
    settings = tx.facts.read_settings(agent_id) or offer.plan(entry.queue).defaults
    if settings != offer.settings:
        return False
    return tx.facts.read_context_tokens(agent_id) == offer.context_tokens
