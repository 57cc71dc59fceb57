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
from agentkeep.loop.texts import CONTINUE_NOTICE, FAILURE_NOTE
from agentkeep.persistence.interface import Transaction
from agentkeep.runtime import session_turns
from agentkeep.runtime.history_kv import erase_history_kv
from agentkeep.runtime.kv_areas import CALL_AREA, RUN_AREA, area_prefix
from agentkeep.runtime.loop_facts import append_event, append_record
from agentkeep.runtime.plan_ports import (
    NO_LIFECYCLE_HOOKS,
    NO_TOOL_CALL_HOOKS,
    ConsumptionPolicy,
    LifecycleHooks,
    ToolCallHooks,
)
from agentkeep.runtime.queue_consumption import consume_queue
from agentkeep.runtime.tool_claims import claim_result
from agentkeep.types import (
    AssistantBlock,
    SystemMessage,
    TextBlock,
)
from agentkeep.types import ledger as events
from agentkeep.types.records import (
    BlockRecord,
    CompactionRecord,
    ConversationRecord,
    SystemRecord,
    ToolRecord,
    UserRecord,
)


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
            return consume_queue(tx, agent_id, plan, policy)
        case ConsumeNotices():
            return _open_inference(tx, agent_id, plan, policy, lifecycle)
        case AppendBlock(block=block, private_calls=private, owed=owed_open):
            record = append_record(tx, agent_id, _block_record(block, private))
            _block_completed(tx, lifecycle, plan.hooks, record)
            if owed_open is not None:
                tx.facts.write_owed(agent_id, owed_open)
            return Appended(records=(record,))
        case FinishResponse(blocks=blocks, tokens=tokens, settle=settle, answer=answer):
            private = plan.private_calls
            appended = tuple(append_record(tx, agent_id, _block_record(b, private)) for b in blocks)
            for record in appended:
                _block_completed(tx, lifecycle, plan.hooks, record)
            if plan.message is not None:
                # The response's message is complete: the wire's ``message`` event, so the
                # ledger alone tells both sides of the conversation (docs/ledger.md).
                append_event(tx, agent_id, events.MESSAGE, events.assistant_event(plan.message))
            if tokens is not None:
                tx.facts.write_context_tokens(agent_id, tokens.total)
            end = {} if tokens is None else {"tokens": msgspec.to_builtins(tokens)}
            append_event(tx, agent_id, events.RESPONSE_END, end)
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
            append_event(tx, agent_id, events.TOOL_BATCH, {"calls": batch})
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
            record = append_record(tx, agent_id, SystemRecord(message=note, reason="failure"))
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
        records.append(append_record(tx, agent_id, _continue_notice(tx, agent_id)))
    for notice in tx.queue.notices(agent_id):
        if tx.queue.remove_notice(agent_id, notice.seq):
            records.append(append_record(tx, agent_id, SystemRecord(message=notice.message)))
    settings = plan.settings or tx.facts.read_settings(agent_id)
    if settings is not None:
        for message in policy.inference_notices(tx, owed, settings):
            records.append(append_record(tx, agent_id, SystemRecord(message=message)))
    opened = tx.records.count(agent_id)  # the stage is open while nothing follows
    tx.facts.write_owed(agent_id, msgspec.structs.replace(owed, stage_opened_at=opened))
    for hook in plan.hooks:  # before_inference_transact: the history as the request sees it
        lifecycle.run(tx, hook)
    return Appended(records=tuple(records))


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
    record = append_record(
        tx, agent_id, ToolRecord(message=winner), internal_id=pending.internal_id
    )
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
        records.append(
            append_record(tx, agent_id, ToolRecord(message=result), ran=False, **answered)
        )
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
    append_event(tx, agent_id, events.SETTLED, {})
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
    append_event(tx, agent_id, events.COMPACTION, compaction)
