"""Consuming queued messages into the conversation (the ``ConsumeQueue`` plan), inside one
transaction: claiming entries (an atomic delete each, so of two owners exactly one consumes
an entry), applying their options, a provider/model/profile switch with its reset or
rejection, the message boundary's notices, the records and their events, and the durable
owed fact. Steering outranks send by what is durable (invariant I5).
"""

from __future__ import annotations

from agentkeep.loop.plans import (
    Consumed,
    ConsumeQueue,
)
from agentkeep.loop.requests import batch_through_request, request_of, requested_call
from agentkeep.persistence.interface import Transaction
from agentkeep.runtime import session_turns
from agentkeep.runtime.history_kv import erase_history_kv
from agentkeep.runtime.loop_facts import append_event, append_record
from agentkeep.runtime.plan_ports import ConsumptionPolicy
from agentkeep.types import (
    Settings,
)
from agentkeep.types import ledger as events
from agentkeep.types.records import (
    BlockRecord,
    ConversationRecord,
    QueuedMessage,
    SystemRecord,
    UserRecord,
)
from agentkeep.types.selection import apply_options


def consume_queue(
    tx: Transaction, agent_id: str, plan: ConsumeQueue, policy: ConsumptionPolicy
) -> Consumed:
    # A send is consumed only when no steering is queued (below). Each read is a slice of
    # the writer's remembered queue: no Python pass over a backlog.
    steering = tx.queue.messages(agent_id, "steering") if plan.queue == "send" else []
    entries = tx.queue.messages(agent_id, plan.queue)
    if steering:
        # Steering outranks send by what is durable, not by what the mirror has heard of
        # yet (invariant I5): consume nothing, and let the loop take the steering first.
        previous = tx.facts.read_settings(agent_id) or plan.defaults
        return Consumed(
            records=(), settings=previous, remaining=tuple(entries), outranked=tuple(steering)
        )
    # An all-at-once batch ends at a tool request: nothing later may replace its settings or
    # come between its call and the call's result.
    offered = entries[:1] if plan.mode == "one-at-a-time" else batch_through_request(entries)
    # Claim each entry with an atomic delete: of two owners, exactly one consumes it.
    claimed: list[QueuedMessage] = [
        e for e in offered if tx.queue.dequeue(agent_id, plan.queue, e.seq)
    ]
    previous = tx.facts.read_settings(agent_id) or plan.defaults
    if not claimed:
        remaining = tuple(tx.queue.messages(agent_id, plan.queue))
        return Consumed(records=(), settings=previous, remaining=remaining)
    current = previous
    for entry in claimed:
        session_turns.consumed(tx, agent_id, entry.id)  # first: what follows is its turn's
        current = apply_options(current, entry.options)
    reset = False
    records: list[ConversationRecord] = []
    switched = (current.provider, current.model) != (previous.provider, previous.model)
    # Profiles never share model context: changing the profile in effect always
    # resets, exactly as an incompatible model switch does.
    reprofiled = current.profile != previous.profile
    if (switched and current.model is not None) or reprofiled:
        reset = reprofiled or policy.needs_reset(previous, current)
        rejected = False
        try:
            handoff = policy.model_changed(tx, previous, current, reset)
        except Exception:
            if not reset:
                handoff = None  # a compatible switch goes ahead without the hook's say
            else:
                # An incompatible switch whose hook failed is rejected: the history
                # survives and the previous selection stays (the message is consumed).
                reset, handoff, rejected = False, None, True
                current = _keep_selection(previous, current)
        switch: dict[str, object] = {
            "previous": _selection_event(previous, reprofiled),
            "current": _selection_event(current, reprofiled),
            "reset": reset,
            "rejected": rejected,
        }
        if reset:
            switch["epoch"] = _restart_history(tx, agent_id, previous)
        append_event(tx, agent_id, events.MODEL_SWITCH, switch)
        if reset and handoff is not None:
            records.append(
                append_record(tx, agent_id, SystemRecord(message=handoff, reason="handoff"))
            )
    for entry in claimed:
        record = UserRecord(
            message_id=entry.id,
            message=entry.message,
            metadata=entry.metadata,
            profile=entry.options.profile,
        )
        delivery = "steer" if entry.queue == "steering" else "send"
        # Its message boundary: after the reset (and handoff) above, right before its record.
        for notice in policy.message_notices(tx, entry, current):
            records.append(append_record(tx, agent_id, SystemRecord(message=notice)))
        records.append(append_record(tx, agent_id, record, delivery=delivery))
        policy.message_accepted(tx, entry, current)
        request = request_of(entry.message)
        if request is not None:
            # The runtime's own call, in the same transaction: a restart before its dispatch
            # finds it stranded and dispatches it under this same id.
            call = requested_call(request, plan.call_id)
            records.append(append_record(tx, agent_id, BlockRecord(block=call)))
            # The completed call, after the message's acceptance hooks (its live call
            # events follow the commit; no inference is made up for it).
            policy.call_requested(tx, call, current)
    # Compared with the durable mode read in this transaction: each change is reported by
    # exactly the consumption that commits it, once.
    mode_change = None
    if current.permission_mode != previous.permission_mode:
        policy.permission_mode_changed(tx, previous, current)
        mode_change = (previous.permission_mode, current.permission_mode)
    if current != previous or tx.facts.read_settings(agent_id) is None:
        tx.facts.write_settings(agent_id, current)
    tx.facts.write_owed(agent_id, plan.owed)
    remaining = tuple(tx.queue.messages(agent_id, plan.queue))
    return Consumed(
        records=tuple(records),
        settings=current,
        remaining=remaining,
        reset=reset,
        permission_change=mode_change,
    )


def _keep_selection(previous: Settings, current: Settings) -> Settings:
    """A rejected switch keeps what would have reset: provider, model and profile."""
    return Settings(
        provider=previous.provider,
        model=previous.model,
        effort=current.effort,
        service_tier=current.service_tier,
        permission_mode=current.permission_mode,
        profile=previous.profile,
    )


def _selection_event(settings: Settings, reprofiled: bool) -> dict[str, object]:
    """One side of a ``model.switch`` event; the profile only when it was to change."""
    side: dict[str, object] = {"provider": settings.provider, "model": settings.model}
    if reprofiled:
        side["profile"] = settings.profile
    return side


def _restart_history(tx: Transaction, agent_id: str, previous: Settings) -> int | None:
    """An incompatible switch restarts what the provider sees: the conversation moves whole
    into an archived epoch (readable until an explicit purge, never deleted here), and its
    message identities, history store and measured size go — all inside the consumption
    transaction."""
    released = [r.message_id for r in tx.records.load(agent_id) if isinstance(r, UserRecord)]
    tx.queue.release_message_ids(agent_id, released)
    epoch = tx.archive.add_epoch(agent_id, None, reason="model_switch", settings=previous)
    tx.records.rewrite(agent_id, [])
    erase_history_kv(tx, agent_id)  # with the history it belonged to; old handles expire
    tx.facts.write_context_tokens(agent_id, None)
    return epoch
