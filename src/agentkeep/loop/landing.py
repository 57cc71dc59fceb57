"""What a landed commit changes: the durable mirror follows the store; :func:`landed` says
what the run learned (``transitions.commit_landed`` takes it on from there).

Every change to the mirror is applied here, when its commit lands (never before), so the
mirror is always a state the store has held. Acceptance (``WorkAccepted``) adds queued entries
the same way: they are durable already.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from operator import attrgetter
from typing import TypeVar

import msgspec

from agentkeep.loop import compaction, preparation, tools
from agentkeep.loop.context import LoopContext
from agentkeep.loop.effects import Observe
from agentkeep.loop.outcomes import Outcome
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
    Plan,
    PlanResult,
    ReplaceWithCompaction,
    Settle,
    StageOwed,
)
from agentkeep.types.records import CompactionRecord, QueuedMessage, QueuedNotice, UserRecord

Entry = TypeVar("Entry", QueuedMessage, QueuedNotice)
_seq = attrgetter("seq")


def _mirror(entries: list[Entry], entry: Entry) -> None:
    """Add ``entry`` to ``entries`` unless there. ``entries`` is in seq order, each seq once
    (what every change here keeps); a new entry is nearly always the last, and otherwise a
    bisection finds its place, so a long backlog costs no scan per entry."""
    if not entries or entries[-1].seq < entry.seq:
        entries.append(entry)
        return
    at = bisect_left(entries, entry.seq, key=_seq)
    if entries[at].seq != entry.seq:
        entries.insert(at, entry)


def accept(ctx: LoopContext, message: QueuedMessage | None, notice: QueuedNotice | None) -> None:
    """Mirror a durably accepted entry (once, in sequence order)."""
    if message is not None:
        _mirror(ctx.mirror.queued[message.queue], message)
    if notice is not None:
        _mirror(ctx.mirror.notices, notice)


def accept_all(ctx: LoopContext, messages: Sequence[QueuedMessage]) -> None:
    """Mirror durable entries the mailbox may not have told yet (a landed commit read the
    whole queue). Nearly always the mirror is that queue already, which a C-level list
    comparison tells (the entries are mostly the very objects the mirror holds, so each
    compares by identity); otherwise one pass over them with a set of the seqs already
    mirrored, then one sort per queue that gained any — not a search of the mirror per
    entry (with a backlog of 1,500 that was 70% of each step)."""
    steering, send = ctx.mirror.queued["steering"], ctx.mirror.queued["send"]
    split = len(steering)  # ``messages`` is in rank order: steering, then send, each by seq
    if (
        len(messages) == split + len(send)
        and list(messages[:split]) == steering
        and list(messages[split:]) == send
    ):
        return
    for queue, entries in ctx.mirror.queued.items():
        known = set(map(_seq, entries))
        new = []
        for message in messages:
            if message.queue == queue and message.seq not in known:
                known.add(message.seq)
                new.append(message)
        if new:
            entries.extend(new)
            entries.sort(key=_seq)


def landed(ctx: LoopContext, plan: Plan, value: PlanResult) -> Outcome:
    """Mirror what ``plan`` committed (``value``: its result) and go on with the steps it
    unblocks; the outcome is what the run learned (the turn's ids are durable, the run
    settled or not), ``WAITING`` for anything else."""
    ctx.commits.in_flight = None
    turn = ctx.turn
    match plan:
        case ConsumeQueue():
            consumed(ctx, plan, plan.committed(value))
        case ConsumeNotices():
            appended = plan.committed(value)
            ctx.mirror.records.extend(appended.records)
            ctx.mirror.notices = []
            if appended.records:
                turn.needs_inference = True
            if not ctx.mirror.has_input():
                # Appending the last notice answers the turn its acceptance asked for (a
                # before_turn's inject lands in its own turn's stage: asking for another
                # turn would run before_turn again, which may inject again — forever).
                ctx.requests.turn = False
            # As written: the stage marked opened at the conversation's length now.
            opened = len(ctx.mirror.records)
            ctx.mirror.owed = msgspec.structs.replace(plan.owed, stage_opened_at=opened)
        case AppendBlock():
            ctx.mirror.records.extend(plan.committed(value).records)
            if plan.owed is not None:
                ctx.mirror.owed = plan.owed
        case AnswerCalls() | AppendFailureNote():
            ctx.mirror.records.extend(plan.committed(value).records)
        case FinishResponse():
            response_finished(ctx, plan, plan.committed(value))
        case StageOwed(owed=owed):
            ctx.mirror.owed = owed
            if turn.opening:
                turn.opening = False
                return Outcome.IDS_DURABLE  # the ids its hooks are told are durable now
        case LifecycleEdge(hooks=hooks):
            closed = {h.hook for h in hooks}
            if "after_turn_transact" in closed:
                return Outcome.TURN_CLOSED
            if "after_agent_loop_transact" in closed:
                return Outcome.LOOP_CLOSED
        case DispatchBatch(calls=calls, owed=owed):
            ctx.mirror.owed = owed
            tools.run_batch(ctx, calls, resumed=False)
        case CommitToolResult():
            ctx.mirror.records.extend(plan.committed(value).records)
            if plan.owed_after is not None:
                ctx.mirror.owed = plan.owed_after
            tools.result_committed(ctx)
        case ClaimToolResults():
            tools.claimed(ctx)
        case ReplaceWithCompaction(through_position=through, messages=messages):
            suffix = ctx.mirror.records[through:]
            owes = plan.owes_answer
            ctx.mirror.records = [CompactionRecord(messages=messages, owes_answer=owes), *suffix]
            ctx.mirror.context_tokens = None
            ctx.mirror.owed = plan.owed
            # The coming request is prepared again against the replacement (its stage opens
            # after it: ``plan.owed`` is not marked ``stage_opened_at``).
            preparation.replaced(ctx)
            compaction.replaced(ctx)
        case Settle():
            # Not settled: work arrived while settling, and it is owed.
            return Outcome.SETTLED if plan.committed(value).settled else Outcome.NOT_SETTLED
    return Outcome.WAITING


def response_finished(ctx: LoopContext, plan: FinishResponse, value: Appended) -> None:
    """Mirror a response's end (its last blocks, its measurement, perhaps the settlement)."""
    ctx.mirror.records.extend(value.records)
    if plan.owed is not None and not value.settled:
        ctx.mirror.owed = plan.owed
    accept_all(ctx, value.queued)  # what the mailbox has not told us yet
    if plan.tokens is not None:
        ctx.mirror.context_tokens = plan.tokens.total
    if value.settled:
        ctx.turn.settled_early = True
        ctx.mirror.owed = None


def consumed(ctx: LoopContext, plan: ConsumeQueue, value: Consumed) -> None:
    """Mirror a landed consumption (its own commit, or an acceptance's: ``loop.offers``)."""
    queue, turn = plan.queue, ctx.turn
    if value.reset:
        ctx.mirror.records = list(value.records)
        ctx.mirror.context_tokens = None
    else:
        ctx.mirror.records.extend(value.records)
    ctx.mirror.settings = value.settings
    ctx.mirror.queued[queue] = list(value.remaining)
    if value.outranked:
        accept_all(ctx, value.outranked)
        turn.step = "steering"  # take the steering this pass did not know of
    if value.records:
        turn.needs_inference = True
        ctx.mirror.owed = plan.owed
    for record in value.records:
        if isinstance(record, UserRecord):  # durable: now it may be observed
            ctx.out.append(Observe(hook="message_accepted", accepted=record, queue=queue))
    if value.permission_change is not None:  # committed: now it may be observed
        change = value.permission_change
        ctx.out.append(Observe(hook="permission_mode_changed", permission_change=change))
    tools.take_requested(ctx, value.records)
    if not ctx.mirror.has_input():
        ctx.requests.turn = False  # consuming the last input answers the request
