"""The tool-batch steps (spec §3.5): dispatch, run, land results in batch order, abandon."""

from __future__ import annotations

from collections.abc import Sequence

from agentkeep.loop.batch import ToolBatch
from agentkeep.loop.context import LoopContext
from agentkeep.loop.effects import CancelTools, Emit, StartTools
from agentkeep.loop.phases import Recorded
from agentkeep.loop.plans import CommitToolResult, DispatchBatch, StageOwed
from agentkeep.loop.requests import calls_recorded
from agentkeep.loop.texts import ABORTED_CALL
from agentkeep.model import ConversationRecord, PendingToolCall, ToolCallEnd, ToolCallStart


def start_batch(ctx: LoopContext, calls: list[PendingToolCall], *, resumed: bool) -> None:
    ctx.turn.resume = None
    if resumed:
        if ctx.owed is None or ctx.owed.stage != "tools":
            ctx.commit(StageOwed(owed=ctx.owed_now("tools")))
        run_batch(ctx, tuple(calls), resumed=True)
    else:
        ctx.commit(DispatchBatch(calls=tuple(calls), owed=ctx.owed_now("tools")))


def run_batch(ctx: LoopContext, calls: tuple[PendingToolCall, ...], *, resumed: bool) -> None:
    batch = ToolBatch(calls, resumed=resumed)
    ctx.turn.batch = batch
    if ctx.turn.aborted:
        # Aborted while the dispatch committed: the batch is durable, but no call starts;
        # each is answered as aborted, in order, like a running call would be.
        batch.abort_running(ABORTED_CALL)
    runs = batch.runs()
    ctx.children.update(r.internal_id for r in runs)
    if runs:
        ctx.out.append(StartTools(runs=runs))
    pump_results(ctx)


def pump_results(ctx: LoopContext) -> None:
    """Commit the next result in batch order, if it is in and none is committing."""
    batch = ctx.turn.batch
    if batch is None or batch.committing:
        return
    ready = batch.next_ready()
    if ready is None:
        return
    pending, result = ready
    last = batch.is_last(pending)
    batch.committing = True
    ctx.commit(
        CommitToolResult(
            pending=pending,
            result=result,
            owed_after=ctx.owed_for_inference() if last else None,
        )
    )


def abandon(ctx: LoopContext) -> None:
    """Answer the running calls as aborted and cancel them (never waited for)."""
    if ctx.turn.batch is None:
        return
    running = ctx.turn.batch.abort_running(ABORTED_CALL)
    if running:
        ctx.out.append(CancelTools(internal_ids=running))


def take_requested(ctx: LoopContext, records: Sequence[ConversationRecord]) -> None:
    """A consumed message requested a tool call: it is dispatched before anything else of
    the pass, through the normal batch path. Its live call events follow the commit; no
    inference is invented for it."""
    calls = calls_recorded(records)
    if not calls:
        return
    ctx.turn.resume = Recorded([ctx.pending(i, c) for i, c in enumerate(calls)])
    for call in calls:
        start = ToolCallStart(call_id=call.call_id, name=call.name, namespace=call.namespace)
        ctx.out.append(Emit(event=start))
        ctx.out.append(Emit(event=ToolCallEnd(call_id=call.call_id, arguments=call.arguments)))


def answer_undispatched(ctx: LoopContext) -> bool:
    """On abort: answer the calls recorded but not yet dispatched (a tool request, or
    calls stranded by a restart) so none is left open or runs in a later turn. True if
    an answer is being committed."""
    turn = ctx.turn
    if not isinstance(turn.resume, Recorded):
        return False
    calls, turn.resume = turn.resume.calls, None
    ctx.commit(ctx.answer(calls, ABORTED_CALL))
    return True
