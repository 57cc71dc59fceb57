"""The tool-batch steps: dispatch, run, land results in batch order, abandon;
and the lifetime flags (``tools/definition.py``: steering interrupts ``steerable`` calls; a
drain interrupts them too and leaves ``reloadable`` calls pending for the next process)."""

from __future__ import annotations

from collections.abc import Sequence

from agentkeep.loop.batch import ToolBatch
from agentkeep.loop.context import LoopContext
from agentkeep.loop.effects import CancelTools, Emit, LifecycleIds, StartTools
from agentkeep.loop.events import ToolLifetimes
from agentkeep.loop.phases import Recorded
from agentkeep.loop.plans import ClaimToolResults, CommitToolResult, DispatchBatch, StageOwed
from agentkeep.loop.requests import calls_recorded
from agentkeep.loop.texts import ABORTED_CALL, DRAINED_CALL, STEERED_CALL
from agentkeep.types import ToolCallEnd, ToolCallStart, ToolResultMessage
from agentkeep.types.records import ConversationRecord, PendingToolCall, QueuedMessage


def start_batch(ctx: LoopContext, calls: list[PendingToolCall], *, resumed: bool) -> None:
    ctx.turn.resume = None
    ctx.turn.asked_by = None  # recovered calls: the request that asked is not known
    if resumed:
        if ctx.mirror.owed is None or ctx.mirror.owed.stage != "tools":
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
        ids = LifecycleIds(
            loop_id=ctx.lifecycle.loop_id,
            turn_id=ctx.lifecycle.turn_id,
            inference_id=ctx.turn.asked_by,
        )
        ctx.out.append(StartTools(runs=runs, ids=ids))
    pump_results(ctx)


def finished(ctx: LoopContext, internal_id: str, result: ToolResultMessage) -> None:
    """A call's tool finished: its result lands in batch order (an abandoned call's is
    ignored)."""
    ctx.children.discard(internal_id)
    batch = ctx.turn.batch
    if batch is not None and batch.finish(internal_id, result):
        pump_results(ctx)


def pump_results(ctx: LoopContext) -> None:
    """Commit the next result in batch order, if it is in and none is committing."""
    batch = ctx.turn.batch
    if batch is None or batch.committing:
        return
    ready = batch.next_ready()
    if ready is None:
        if ctx.requests.shutdown and batch.stalled:
            _leave_drained(ctx)
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


def result_committed(ctx: LoopContext) -> None:
    """A result of the batch landed: the next goes out, or (the last) the batch is done and
    the pass goes on to the inference its results owe."""
    batch = ctx.turn.batch
    if batch is None:
        return
    batch.committed_one()
    if batch.done:
        ctx.turn.batch = None
        ctx.turn.needs_inference = True
        ctx.turn.step = "steering"
    else:
        pump_results(ctx)


def _leave_drained(ctx: LoopContext) -> None:
    """A drain stopped the batch at a reloadable call it left pending: the results that
    finished behind it are claimed (they land in order in the next process, never run
    again), then the batch is left as it durably is."""
    batch = ctx.turn.batch
    assert batch is not None
    claims = batch.unclaimed()
    if claims:
        batch.committing = True
        ctx.commit(ClaimToolResults(claims=claims))
    else:
        ctx.turn.batch = None  # the pending calls and ``owed`` stay for the next process


def claimed(ctx: LoopContext) -> None:
    """The drained batch's results are claimed: it goes no further in this process."""
    ctx.turn.batch = None


def note_lifetimes(ctx: LoopContext, lifetimes: ToolLifetimes) -> None:
    """The runtime told which running calls are steerable or reloadable (right after they
    started, before any later event): a drain or steering that came first applies now."""
    batch = ctx.turn.batch
    if batch is None:
        return
    batch.steerable.update(lifetimes.steerable)
    batch.reloadable.update(lifetimes.reloadable)
    if ctx.requests.shutdown:
        drain(ctx)  # started while draining (a dispatch that landed meanwhile)
    elif ctx.mirror.queued["steering"]:
        # Steering still queued was never seen by the model that asked for these calls (it
        # was accepted while the response streamed, or is next in line): it would wait
        # behind the batch, so it interrupts the steerable calls as if accepted now.
        _interrupt(ctx, batch.steerable, STEERED_CALL)


def steer(ctx: LoopContext, message: QueuedMessage) -> None:
    """Newly accepted steering interrupts the running steerable calls: each is
    answered at once and cancelled, like an abort of that call alone."""
    batch = ctx.turn.batch
    if batch is None or message.queue != "steering" or not batch.steerable:
        return
    if any(m.seq == message.seq for m in ctx.mirror.queued["steering"]):
        return  # not new: the mirror knew it already
    _interrupt(ctx, batch.steerable, STEERED_CALL)


def drain(ctx: LoopContext) -> None:
    """Graceful drain: reloadable calls are abandoned without a result (pending for the
    next process, which runs them again), steerable ones are answered as interrupted
    instead of waited for; ordinary calls finish and commit."""
    batch = ctx.turn.batch
    if batch is None:
        return
    parked = batch.park(batch.reloadable)
    if parked:
        ctx.out.append(CancelTools(internal_ids=parked))
    _interrupt(ctx, batch.steerable - batch.reloadable, DRAINED_CALL)
    pump_results(ctx)


def _interrupt(ctx: LoopContext, internal_ids: set[str], text: str) -> None:
    batch = ctx.turn.batch
    assert batch is not None
    answered = batch.interrupt(internal_ids, text)
    if answered:
        ctx.out.append(CancelTools(internal_ids=answered))
        pump_results(ctx)


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
