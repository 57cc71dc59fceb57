"""The loop's transactions: each plan runs whole inside one store transaction, or not at all.

The loop names what must commit as data (:mod:`agentkeep.loop.plans`); this module, above
both the loop and the store, says how: :func:`execute` interprets one plan against a
``Transaction``.

These bodies run in the writer's thread (``StoreHandle.transact``). They read what they decide
from inside the transaction — never from the caller's memory — so a queue entry another owner
already consumed, or a result a tool already committed, is seen as it durably is.

The session event ledger (``docs/ledger.md``): every fact a plan commits appends its event in
the same transaction — each conversation record through :func:`_append`, and the batch, the
response end, compaction, a model switch and settlement where they happen. Nothing here ever
touches an earlier event (compaction and resets rewrite records, never the ledger). A loop
fact cannot be refused, so an oversized event is appended with ``fit`` (its payload left out,
the content still in the transcript).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import msgspec

from agentkeep.loop.plans import (
    AnswerCalls,
    AppendBlock,
    Appended,
    AppendFailureNote,
    ClaimToolResults,
    CommitToolResult,
    Consumed,
    ConsumeNotices,
    ConsumeQueue,
    DispatchBatch,
    FinishResponse,
    LifecycleEdge,
    LifecycleHook,
    Plan,
    ReplaceWithCompaction,
    Settle,
    Settled,
    Snapshot,
    StageOwed,
)
from agentkeep.loop.provider_calls import is_private
from agentkeep.loop.requests import batch_through_request, request_of, requested_call
from agentkeep.loop.texts import CONTINUE_NOTICE, FAILURE_NOTE
from agentkeep.persistence.interface import Transaction
from agentkeep.runtime import session_turns
from agentkeep.runtime.history_kv import erase_history_kv
from agentkeep.runtime.kv_areas import CALL_AREA, RUN_AREA, area_prefix
from agentkeep.runtime.tool_claims import claim_result
from agentkeep.types import (
    AssistantBlock,
    JSONObject,
    Settings,
    SystemMessage,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
)
from agentkeep.types import ledger as events
from agentkeep.types.records import (
    BlockRecord,
    CompactionRecord,
    ConversationRecord,
    OwedWork,
    PendingToolCall,
    QueuedMessage,
    SystemRecord,
    ToolRecord,
    UserRecord,
)
from agentkeep.types.selection import apply_options


class ConsumptionPolicy(Protocol):
    """What a consumption needs from the system: the reset rule for provider/model switches
    and the features' hooks that run inside the consumption transaction."""

    def needs_reset(self, previous: Settings, current: Settings) -> bool:
        """True if the change is incompatible and the history must be erased."""
        ...

    def model_changed(
        self, tx: Transaction, previous: Settings, current: Settings, was_reset: bool
    ) -> SystemMessage | None:
        """Run the ``model_changed`` hook inside the consumption transaction; it may return
        the handoff message that opens a reset context. Raising rejects an incompatible
        switch (the message is still consumed under the previous selection)."""
        ...

    def message_accepted(self, tx: Transaction, entry: QueuedMessage, settings: Settings) -> None:
        """Run ``message_accepted_transact`` for ``entry`` as it enters the conversation,
        inside the consumption transaction; raising rolls the consumption back."""
        ...

    def permission_mode_changed(
        self, tx: Transaction, previous: Settings, current: Settings
    ) -> None:
        """Run ``permission_mode_changed_transact`` for a consumption that changes the
        permission mode, inside its transaction; raising rolls the consumption back."""
        ...

    def observes_history_erasure(self) -> bool:
        """Whether :meth:`history_erased` runs any hook (else the compaction replaces its
        records in one step)."""
        ...

    def history_erased(self, tx: Transaction) -> None:
        """Run ``history_erased_transact`` inside a compaction's replacement transaction,
        after the old records and the history KV were erased and before the replacement is
        appended; raising rolls the compaction back."""
        ...

    def message_notices(
        self, tx: Transaction, entry: QueuedMessage, settings: Settings
    ) -> Sequence[SystemMessage]:
        """The notices to append right before ``entry``'s record (its message boundary:
        after any reset its consumption causes), inside the consumption transaction;
        raising rolls the consumption back."""
        ...

    def inference_notices(
        self, tx: Transaction, owed: OwedWork, settings: Settings
    ) -> Sequence[SystemMessage]:
        """The notices to append right before the request ``owed`` names (its inference
        boundary), inside the inference stage's opening transaction; raising rolls the
        stage back (no request is made)."""
        ...

    def call_requested(self, tx: Transaction, call: ToolCallBlock, settings: Settings) -> None:
        """Run ``on_event_transact`` for the assistant call a consumed tool request appended,
        inside the consumption transaction (after the message's acceptance hooks); raising
        rolls the consumption back."""
        ...


class KeepEverything:
    """A consumption policy for callers without a registry or features: never reset, no
    hooks."""

    def needs_reset(self, previous: Settings, current: Settings) -> bool:
        return False

    def model_changed(
        self, tx: Transaction, previous: Settings, current: Settings, was_reset: bool
    ) -> SystemMessage | None:
        return None

    def message_accepted(self, tx: Transaction, entry: QueuedMessage, settings: Settings) -> None:
        return None

    def permission_mode_changed(
        self, tx: Transaction, previous: Settings, current: Settings
    ) -> None:
        return None

    def observes_history_erasure(self) -> bool:
        return False

    def history_erased(self, tx: Transaction) -> None:
        return None

    def message_notices(
        self, tx: Transaction, entry: QueuedMessage, settings: Settings
    ) -> Sequence[SystemMessage]:
        return ()

    def inference_notices(
        self, tx: Transaction, owed: OwedWork, settings: Settings
    ) -> Sequence[SystemMessage]:
        return ()

    def call_requested(self, tx: Transaction, call: ToolCallBlock, settings: Settings) -> None:
        return None


class ToolCallHooks(Protocol):
    """The features' transactional tool-call hooks, run inside a plan's transaction.
    Raising rolls the whole plan back (``agentkeep.tools.hooks``)."""

    def before_tool_call(self, tx: Transaction, call: PendingToolCall) -> None:
        """Once per call of a freshly dispatched batch, inside the dispatch transaction."""
        ...

    def after_tool_call(
        self, tx: Transaction, call: PendingToolCall, result: ToolResultMessage
    ) -> None:
        """Inside the transaction that appends a call's (winning) result — a dispatched
        call's, or the error answering one that never ran (``AnswerCalls``)."""
        ...


class NoToolCallHooks:
    """Tool-call hooks for callers without features: nothing runs."""

    def before_tool_call(self, tx: Transaction, call: PendingToolCall) -> None:
        return None

    def after_tool_call(
        self, tx: Transaction, call: PendingToolCall, result: ToolResultMessage
    ) -> None:
        return None


NO_TOOL_CALL_HOOKS = NoToolCallHooks()


class LifecycleHooks(Protocol):
    """The features' transactional lifecycle hooks a plan carries (``LifecycleHook``), run
    inside its transaction after the plan's own writes. Raising rolls the whole plan back."""

    def run(self, tx: Transaction, hook: LifecycleHook) -> None:
        """Run ``hook`` (any but ``on_event_transact``) inside ``tx``."""
        ...

    def block(self, tx: Transaction, hook: LifecycleHook, block: AssistantBlock) -> None:
        """Run ``on_event_transact`` for ``block``, which ``tx`` appends."""
        ...


class NoLifecycleHooks:
    """Lifecycle hooks for callers without features: nothing runs."""

    def run(self, tx: Transaction, hook: LifecycleHook) -> None:
        return None

    def block(self, tx: Transaction, hook: LifecycleHook, block: AssistantBlock) -> None:
        return None


NO_LIFECYCLE_HOOKS = NoLifecycleHooks()


def load_snapshot(tx: Transaction, agent_id: str, *, records: bool = True) -> Snapshot:
    """Everything the loop decides from, in one consistent read (records only if asked)."""
    return Snapshot(
        records=tuple(tx.records.load(agent_id)) if records else None,
        record_count=tx.records.count(agent_id),
        queued=tuple(tx.queue.messages(agent_id)),
        notices=tuple(tx.queue.notices(agent_id)),
        pending=tuple(tx.calls.pending(agent_id)),
        settings=tx.facts.read_settings(agent_id),
        owed=tx.facts.read_owed(agent_id),
        context_tokens=tx.facts.read_context_tokens(agent_id),
    )


def execute(
    tx: Transaction,
    agent_id: str,
    plan: Plan,
    policy: ConsumptionPolicy,
    hooks: ToolCallHooks = NO_TOOL_CALL_HOOKS,
    lifecycle: LifecycleHooks = NO_LIFECYCLE_HOOKS,
) -> Consumed | Appended | Settled | None:
    """Run one plan inside ``tx``. Raising rolls the whole plan back."""
    match plan:
        case StageOwed(owed=owed, hooks=edge):
            tx.facts.write_owed(agent_id, owed)
            for hook in edge:  # the edge's hooks, told ids that are durable with them
                lifecycle.run(tx, hook)
            return None
        case LifecycleEdge(hooks=edge):
            for hook in edge:
                lifecycle.run(tx, hook)
            return None
        case ConsumeQueue():
            return _consume_queue(tx, agent_id, plan, policy)
        case ConsumeNotices():
            return _open_inference(tx, agent_id, plan, policy, lifecycle)
        case AppendBlock(block=block, private_calls=private, owed=owed_open):
            record = _append(tx, agent_id, _block_record(block, private))
            _block_completed(tx, lifecycle, plan.hooks, record)
            if owed_open is not None:
                tx.facts.write_owed(agent_id, owed_open)
            return Appended(records=(record,))
        case FinishResponse(blocks=blocks, tokens=tokens, settle=settle, answer=answer):
            private = plan.private_calls
            appended = tuple(_append(tx, agent_id, _block_record(b, private)) for b in blocks)
            for record in appended:
                _block_completed(tx, lifecycle, plan.hooks, record)
            if plan.message is not None:
                # The response's message is complete: the wire's ``message`` event, so the
                # ledger alone tells both sides of the conversation (docs/ledger.md).
                _event(tx, agent_id, events.MESSAGE, events.assistant_event(plan.message))
            if tokens is not None:
                tx.facts.write_context_tokens(agent_id, tokens.total)
            end = {} if tokens is None else {"tokens": msgspec.to_builtins(tokens)}
            _event(tx, agent_id, events.RESPONSE_END, end)
            if answer is not None:
                session_turns.answered(tx, agent_id, answer)
            for hook in plan.hooks:
                if hook.hook == "after_inference_transact":  # the response durably ended
                    lifecycle.run(tx, hook)
            settled = settle and _settle(tx, agent_id).settled
            if not settled and plan.owed is not None:
                tx.facts.write_owed(agent_id, plan.owed)
            queued = () if settled else tuple(tx.queue.messages(agent_id))
            return Appended(records=appended, settled=settled, queued=queued)
        case DispatchBatch(calls=calls, owed=owed):
            # The whole batch is durable before any call runs (invariant I13).
            tx.calls.put(agent_id, list(calls))
            in_order = sorted(calls, key=lambda c: c.index)
            for call in in_order:
                hooks.before_tool_call(tx, call)
            tx.facts.write_owed(agent_id, owed)
            batch = [msgspec.to_builtins(c) for c in in_order]
            _event(tx, agent_id, events.TOOL_BATCH, {"calls": batch})
            return None
        case CommitToolResult():
            return _commit_tool_result(tx, agent_id, plan, hooks)
        case ClaimToolResults(claims=claims):
            for pending, result in claims:
                claim_result(tx, agent_id, pending.internal_id, result)
            return None
        case AnswerCalls():
            return _answer_calls(tx, agent_id, plan, hooks)
        case AppendFailureNote(message=message):
            note = SystemMessage(content=(TextBlock(text=FAILURE_NOTE.format(message)),))
            record = _append(tx, agent_id, SystemRecord(message=note, reason="failure"))
            session_turns.failed(tx, agent_id, message)
            return Appended(records=(record,))
        case Settle(hooks=settling):
            return _settle(tx, agent_id, settling, lifecycle)
        case ReplaceWithCompaction():
            _replace_with_compaction(tx, agent_id, plan, policy)
            return None
    raise TypeError(f"unknown plan {plan!r}")  # pragma: no cover - the union is exhaustive


def _open_inference(
    tx: Transaction,
    agent_id: str,
    plan: ConsumeNotices,
    policy: ConsumptionPolicy,
    lifecycle: LifecycleHooks,
) -> Appended:
    """The inference stage's opening transaction, right before the request (docs/notices.md):
    "Continue from where you left off." when the conversation ends with the model's own
    blocks, then the notices hooks injected (queued, each removed as it is appended: exactly
    once), then the inference boundary's notices of ``system_notifications_transact``, and
    the owed inference naming the request, marked opened at the conversation's length
    (``stage_opened_at``: a restart makes the request without asking for the boundary's
    notices again), and last the request's ``before_inference_transact`` told that id: the
    request's one opening commit. A hook's failure rolls all of it back."""
    owed = plan.owed
    records: list[ConversationRecord] = []
    if plan.continue_response:  # ahead of the boundary's other notices (docs/lifecycle.md)
        records.append(_append(tx, agent_id, _continue_notice(tx, agent_id)))
    for notice in tx.queue.notices(agent_id):
        if tx.queue.remove_notice(agent_id, notice.seq):
            records.append(_append(tx, agent_id, SystemRecord(message=notice.message)))
    settings = plan.settings or tx.facts.read_settings(agent_id)
    if settings is not None:
        for message in policy.inference_notices(tx, owed, settings):
            records.append(_append(tx, agent_id, SystemRecord(message=message)))
    opened = tx.records.count(agent_id)  # the stage is open while nothing follows
    tx.facts.write_owed(agent_id, msgspec.structs.replace(owed, stage_opened_at=opened))
    for hook in plan.hooks:  # before_inference_transact: the history as the request sees it
        lifecycle.run(tx, hook)
    return Appended(records=tuple(records))


def _append(
    tx: Transaction, agent_id: str, record: ConversationRecord, **extra: object
) -> ConversationRecord:
    """Append ``record`` and, in the same transaction, its ledger event (none for a private
    block: it is not published, ``agentkeep.tools.provider_tools``)."""
    position = tx.records.append(agent_id, record)
    if isinstance(record, BlockRecord) and record.private:
        return record
    kind, data = events.record_event(record)
    _event(tx, agent_id, kind, {**data, **extra, "position": position})
    return record


def _block_completed(
    tx: Transaction,
    lifecycle: LifecycleHooks,
    hooks: tuple[LifecycleHook, ...],
    record: ConversationRecord,
) -> None:
    """``on_event_transact`` for a block ``tx`` just appended — a published one only (a
    hidden server call's block is not told, as ``on_event`` is not told its events)."""
    if not hooks or not isinstance(record, BlockRecord) or record.private:
        return
    for hook in hooks:
        if hook.hook == "on_event_transact":
            lifecycle.block(tx, hook, record.block)


def _continue_notice(tx: Transaction, agent_id: str) -> SystemRecord:
    """The notice "Continue from where you left off.": reason ``continue`` when the blocks
    it follows are a cut response (the durable owed fact marks it open), so they and the
    continuation are one assistant message (docs/turns.md); an ordinary ``notice`` before a
    notice that reopens a finished response."""
    owed = tx.facts.read_owed(agent_id)
    cut = owed is not None and owed.response_open
    return SystemRecord(message=CONTINUE_NOTICE, reason="continue" if cut else "notice")


def _block_record(block: AssistantBlock, private_calls: tuple[str, ...]) -> BlockRecord:
    return BlockRecord(
        block=block, private=bool(private_calls) and is_private(block, private_calls)
    )


def _event(tx: Transaction, agent_id: str, type: str, data: JSONObject) -> None:
    """Append a loop fact's event, attributed to the session's running turn (if any). A loop
    fact cannot be refused, so an oversized one is fitted (docs/ledger.md)."""
    tx.ledger.append(agent_id, type, data, turn_id=tx.turns.running_id(agent_id), fit=True)


def _consume_queue(
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
        _event(tx, agent_id, events.MODEL_SWITCH, switch)
        if reset and handoff is not None:
            records.append(_append(tx, agent_id, SystemRecord(message=handoff, reason="handoff")))
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
            records.append(_append(tx, agent_id, SystemRecord(message=notice)))
        records.append(_append(tx, agent_id, record, delivery=delivery))
        policy.message_accepted(tx, entry, current)
        request = request_of(entry.message)
        if request is not None:
            # The runtime's own call, in the same transaction: a restart before its dispatch
            # finds it stranded and dispatches it under this same id.
            call = requested_call(request, plan.call_id)
            records.append(_append(tx, agent_id, BlockRecord(block=call)))
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


def _commit_tool_result(
    tx: Transaction, agent_id: str, plan: CommitToolResult, hooks: ToolCallHooks
) -> Appended:
    pending = plan.pending
    # First committed result wins (a tool's own ``call.commit`` may have claimed already).
    tx.calls.claim_result(agent_id, pending.internal_id, plan.result)
    winner = tx.calls.result_claim(agent_id, pending.internal_id) or plan.result
    if winner.call_id != pending.call.call_id:
        raise ValueError(
            f"result for call {winner.call_id!r} claimed for call {pending.call.call_id!r}"
        )
    if not tx.calls.remove(agent_id, pending.internal_id):
        raise LookupError(f"tool call {pending.internal_id!r} is no longer pending")
    record = _append(tx, agent_id, ToolRecord(message=winner), internal_id=pending.internal_id)
    hooks.after_tool_call(tx, pending, winner)  # before the call's stores are erased
    tx.kv.drop(area_prefix(agent_id, CALL_AREA, pending.internal_id))
    if plan.owed_after is not None:
        tx.facts.write_owed(agent_id, plan.owed_after)
    return Appended(records=(record,))


def _answer_calls(
    tx: Transaction, agent_id: str, plan: AnswerCalls, hooks: ToolCallHooks
) -> Appended:
    """Results for calls that never ran: each appended, then its ``after_tool_call_transact``
    (it runs inside the transaction that appends a result), then its call store erased."""
    records: list[ConversationRecord] = []
    for index, result in enumerate(plan.results):
        answered = {"internal_id": plan.calls[index].internal_id} if index < len(plan.calls) else {}
        records.append(_append(tx, agent_id, ToolRecord(message=result), ran=False, **answered))
        if index < len(plan.calls):
            call = plan.calls[index]
            hooks.after_tool_call(tx, call, result)
            tx.kv.drop(area_prefix(agent_id, CALL_AREA, call.internal_id))
    return Appended(records=tuple(records))


def _settle(
    tx: Transaction,
    agent_id: str,
    hooks: tuple[LifecycleHook, ...] = (),
    lifecycle: LifecycleHooks = NO_LIFECYCLE_HOOKS,
) -> Settled:
    """Settling is committed, never inferred: only when nothing is queued or pending. Its
    hook (``after_agent_settled_transact``) runs once the owed fact is erased, before the
    run's store is (it may still read it)."""
    if tx.queue.messages(agent_id) or tx.queue.notices(agent_id) or tx.calls.pending(agent_id):
        return Settled(settled=False)
    tx.facts.drop_owed(agent_id)
    for hook in hooks:
        lifecycle.run(tx, hook)
    tx.kv.drop(area_prefix(agent_id, RUN_AREA))
    session_turns.settled(tx, agent_id)  # an aborted turn ends by the time its run settles
    _event(tx, agent_id, events.SETTLED, {})
    return Settled(settled=True)


def _replace_with_compaction(
    tx: Transaction, agent_id: str, plan: ReplaceWithCompaction, policy: ConsumptionPolicy
) -> None:
    """Replace records 1..through with the compaction, keeping everything that joined after
    the snapshot (the boundary is a record count, so another owner's later records stay).
    The replaced records move into an archived epoch, readable until an explicit purge; the
    history KV is erased with them. ``history_erased_transact`` runs between the erasure
    and the replacement, all in this one transaction."""
    records = tx.records.load(agent_id)
    erased = records[: plan.through_position]
    released = [r.message_id for r in erased if isinstance(r, UserRecord)]
    tx.queue.release_message_ids(agent_id, released)
    epoch = tx.archive.add_epoch(
        agent_id,
        plan.through_position,
        reason="compaction",
        settings=tx.facts.read_settings(agent_id),
    )
    erase_history_kv(tx, agent_id)  # with the history it belonged to; old handles expire
    suffix = records[plan.through_position :]
    suffix_owes = any(isinstance(r, UserRecord) for r in suffix)
    replacement = CompactionRecord(messages=plan.messages, owes_answer=plan.owes_answer)
    if policy.observes_history_erasure():
        # The hooks run with the old records gone and the replacement not yet there.
        tx.records.rewrite(agent_id, list(suffix))
        policy.history_erased(tx)
        tx.records.replace(agent_id, 0, replacement)  # put first, the suffix after it
    else:
        tx.records.replace(agent_id, plan.through_position, replacement)
    tx.facts.write_context_tokens(agent_id, None)
    if plan.answer_now or suffix_owes:
        tx.facts.write_owed(agent_id, plan.owed)
    compaction = {
        "epoch": epoch,
        "through_position": plan.through_position,
        "owes_answer": plan.owes_answer,
        "messages": [msgspec.to_builtins(m) for m in plan.messages],
    }
    _event(tx, agent_id, events.COMPACTION, compaction)
