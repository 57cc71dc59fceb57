"""What a landed commit changes: the durable mirror follows the store, then the run goes on.

Every change to the mirror is applied here, when its commit lands (never before), so the
mirror is always a state the store has held. Acceptance (``WorkAccepted``) adds queued entries
the same way: they are durable already.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from operator import attrgetter
from typing import TypeVar

from agentkeep.loop import compaction, inference, tools, transitions
from agentkeep.loop.context import LoopContext
from agentkeep.loop.effects import Observe
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
    Plan,
    ReplaceWithCompaction,
    Settle,
    Settled,
    StageOwed,
)
from agentkeep.types import CompactionRecord, QueuedMessage, QueuedNotice, UserRecord

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
        _mirror(ctx.queued[message.queue], message)
    if notice is not None:
        _mirror(ctx.notices, notice)


def accept_all(ctx: LoopContext, messages: Sequence[QueuedMessage]) -> None:
    """Mirror durable entries the mailbox may not have told yet (a landed commit read the
    whole queue). Nearly always the mirror is that queue already, which a C-level list
    comparison tells (the entries are mostly the very objects the mirror holds, so each
    compares by identity); otherwise one pass over them with a set of the seqs already
    mirrored, then one sort per queue that gained any — not a search of the mirror per
    entry (with a backlog of 1,500 that was 70% of each step)."""
    steering, send = ctx.queued["steering"], ctx.queued["send"]
    split = len(steering)  # ``messages`` is in rank order: steering, then send, each by seq
    if (
        len(messages) == split + len(send)
        and list(messages[:split]) == steering
        and list(messages[split:]) == send
    ):
        return
    for queue, entries in ctx.queued.items():
        known = set(map(_seq, entries))
        new = []
        for message in messages:
            if message.queue == queue and message.seq not in known:
                known.add(message.seq)
                new.append(message)
        if new:
            entries.extend(new)
            entries.sort(key=_seq)


def landed(ctx: LoopContext, plan: Plan, value: Consumed | Appended | Settled | None) -> None:
    ctx.commit_in_flight = None
    turn = ctx.turn
    match plan:
        case ConsumeQueue():
            assert isinstance(value, Consumed)
            consumed(ctx, plan, value)
        case ConsumeNotices():
            assert isinstance(value, Appended)
            ctx.records.extend(value.records)
            ctx.notices = []
            if value.records:
                turn.needs_inference = True
                ctx.owed = plan.owed
        case AppendBlock() | AnswerCalls() | AppendFailureNote():
            assert isinstance(value, Appended)
            ctx.records.extend(value.records)
            if isinstance(plan, AppendBlock) and plan.owed is not None:
                ctx.owed = plan.owed
        case FinishResponse(tokens=tokens):
            assert isinstance(value, Appended)
            ctx.records.extend(value.records)
            if plan.owed is not None and not value.settled:
                ctx.owed = plan.owed
            accept_all(ctx, value.queued)  # what the mailbox has not told us yet
            if tokens is not None:
                ctx.context_tokens = tokens.total
            if value.settled:
                turn.settled_early = True
                ctx.owed = None
        case StageOwed(owed=owed):
            ctx.owed = owed
            if turn.opening:
                turn.opening = False
                transitions.open_turn(ctx)  # the ids its hooks are told are durable now
        case DispatchBatch(calls=calls, owed=owed):
            ctx.owed = owed
            tools.run_batch(ctx, calls, resumed=False)
        case CommitToolResult():
            assert isinstance(value, Appended)
            ctx.records.extend(value.records)
            if plan.owed_after is not None:
                ctx.owed = plan.owed_after
            if turn.batch is not None:
                turn.batch.committed_one()
                if turn.batch.done:
                    turn.batch = None
                    turn.needs_inference = True
                    turn.step = "steering"
                else:
                    tools.pump_results(ctx)
        case ClaimToolResults():
            tools.claimed(ctx)
        case ReplaceWithCompaction(through_position=through, messages=messages):
            suffix = ctx.records[through:]
            owes = plan.owes_answer
            ctx.records = [CompactionRecord(messages=messages, owes_answer=owes), *suffix]
            ctx.context_tokens = None
            ctx.owed = plan.owed
            compaction.resolve(ctx, error=None)
        case Settle():
            assert isinstance(value, Settled)
            if value.settled:
                transitions.stop(ctx, settled=True)
            elif transitions.may_continue(ctx):
                transitions.begin_turn(ctx)  # work arrived while settling: it is owed
            else:
                transitions.stop(ctx, settled=False)
    ctx.pump_commits()
    if isinstance(plan, AppendFailureNote):
        transitions.end_turn(ctx)
    elif isinstance(plan, AppendBlock):
        inference.maybe_finish(ctx)
    transitions.decide(ctx)


def consumed(ctx: LoopContext, plan: ConsumeQueue, value: Consumed) -> None:
    """Mirror a landed consumption (its own commit, or an acceptance's: ``loop.offers``)."""
    queue, turn = plan.queue, ctx.turn
    if value.reset:
        ctx.records = list(value.records)
        ctx.context_tokens = None
    else:
        ctx.records.extend(value.records)
    ctx.settings = value.settings
    ctx.queued[queue] = list(value.remaining)
    if value.outranked:
        accept_all(ctx, value.outranked)
        turn.step = "steering"  # take the steering this pass did not know of
    if value.records:
        turn.needs_inference = True
        ctx.owed = plan.owed
    for record in value.records:
        if isinstance(record, UserRecord):  # durable: now it may be observed
            ctx.out.append(Observe(hook="message_accepted", accepted=record, queue=queue))
    if value.permission_change is not None:  # committed: now it may be observed
        change = value.permission_change
        ctx.out.append(Observe(hook="permission_mode_changed", permission_change=change))
    tools.take_requested(ctx, value.records)
    if not ctx.has_input():
        ctx.turn_requested = False  # consuming the last input answers the request
