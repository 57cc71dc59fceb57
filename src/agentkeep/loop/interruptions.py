"""What stops a turn short: a refused commit, a commit whose outcome
is unknown, a failed turn and an abort (invariant I24). Each returns what became
of the run (:class:`~agentkeep.loop.outcomes.Outcome`); ``transitions`` acts on it."""

from __future__ import annotations

from agentkeep.loop import compaction, inference, retry, tools
from agentkeep.loop.context import LoopContext
from agentkeep.loop.effects import (
    CancelCompaction,
    CancelInference,
    CompactionResolved,
    Emit,
    Observe,
)
from agentkeep.loop.outcomes import Outcome
from agentkeep.loop.phases import Compacting, Dispatched, Inferring, Passing, Settling
from agentkeep.loop.plans import (
    AnswerCalls,
    AppendFailureNote,
    ClaimToolResults,
    CommitToolResult,
    LifecycleEdge,
    LifecycleHook,
    Plan,
    ReplaceWithCompaction,
    Settle,
    StageOwed,
)
from agentkeep.loop.texts import ABORTED_CALL, ABORTED_COMPACTION, FAILED_TURN_CALL
from agentkeep.loop.view import undispatched_calls
from agentkeep.types import DONE_CANCELLED, done_error


def commit_failed(ctx: LoopContext, plan: Plan, message: str) -> Outcome:
    """The store refused ``plan``: what it was decides how the turn (or run) goes on."""
    if retry.should_retry(ctx):
        # Retrying forever: a refused write is a failed attempt like any other — go on from
        # the durable state after the backoff (the owed stage stays; no note is appended).
        return continue_from_store(ctx, message)
    ctx.commits.in_flight = None
    # A turn whose ids failed to stage never opens its hooks: it fails like any other.
    ctx.turn.opening = False
    # The outcome may be unknown (an error from COMMIT): trust nothing remembered.
    ctx.mirror.valid = False
    # Nothing after a failed commit may build on it: drop what was queued behind it.
    ctx.commits.clear()
    turn = ctx.turn
    match plan:
        case LifecycleEdge() if turn.closing:
            # A turn's or loop's closing hook refused: the run cannot close. Like a refused
            # settlement, it stops with the owed fact kept, its work all durable; the next
            # start (a message, a restart) runs the loop, and the hook, again.
            return _block_run(ctx, message)
        case StageOwed() if isinstance(ctx.phase, Settling):
            return _block_run(ctx, message)  # the settlement's id could not be staged
        case Settle() | AnswerCalls():
            # The run cannot prove it owes nothing (or cannot close a call): keep owed.
            # (Neither is ever in flight while a response streams or a compaction runs.)
            turn.blocked = True
            ctx.phase = Passing()
            if isinstance(plan, Settle):
                return Outcome.RUN_BLOCKED
            return fail_turn(ctx, message)
        case CommitToolResult():
            # First failed result closes the batch; its entries and owed stay.
            turn.blocked = True
            if turn.batch is not None:
                tools.abandon(ctx)
                turn.batch = None
            return fail_turn(ctx, message)
        case ClaimToolResults():
            # Draining: the claims are lost, the batch stays durable; the next process
            # decides those calls as any restart does.
            tools.claimed(ctx)
            return Outcome.DONE
        case ReplaceWithCompaction():
            compaction.resolve(ctx, error=message)
            return Outcome.DONE
        case AppendFailureNote():
            turn.ending = False
            return Outcome.TURN_OVER
        case _:
            return fail_turn(ctx, message)


def _block_run(ctx: LoopContext, message: str) -> Outcome:
    """The run can neither close nor prove it owes nothing: it stops, owed kept."""
    ctx.turn.blocked = True
    ctx.turn.closing = False
    ctx.run.failure = ctx.run.failure or message
    ctx.phase = Passing()
    return Outcome.RUN_BLOCKED


def continue_from_store(ctx: LoopContext, message: str) -> Outcome:
    """A commit may or may not have landed: nothing remembered can be trusted. Drop the
    turn's memory (children are cancelled, nothing is written from memory) and go on from
    the durable state, exactly as a restarted process would — the path every crash
    campaign proves."""
    ctx.commits.in_flight = None
    ctx.turn.opening = False  # its hooks never open: the reload (or the stop) replaces it
    ctx.commits.clear()
    ctx.mirror.valid = False
    phase = ctx.phase
    if isinstance(phase, Inferring):
        inference.disarm(ctx, phase)
        ctx.out.append(CancelInference(inference_id=phase.inference_id))
        ctx.out.append(Emit(event=done_error(message)))
        ctx.phase = Passing()  # its held blocks are dropped with it
    if ctx.turn.batch is not None:
        tools.abandon(ctx)  # they run on unobserved; the reload decides their calls
        ctx.turn.batch = None
    if retry.should_retry(ctx):
        # Retrying forever: the compaction request stays for the next turn.
        retry.cancel(ctx)
        _cancel_compaction(ctx)
        ctx.mirror.resume_checked = False
        return Outcome.MEMORY_LOST_RETRYING
    _end_compaction(ctx, error=message)
    ctx.failures.turns += 1
    if ctx.failures.turns >= ctx.config.max_failed_turns:
        return Outcome.RUN_BLOCKED
    ctx.mirror.resume_checked = False  # a trailing question found on reload is owed an answer
    return Outcome.MEMORY_LOST


def fail_turn(ctx: LoopContext, message: str) -> Outcome:
    """The turn cannot go on: stop children, close unanswered calls, note the failure.
    ``TURN_OVER``, or ``WAITING`` while the answers to its open calls commit."""
    retry.cancel(ctx)  # a backoff under way (retrying stopped meanwhile) ends with the turn
    phase, turn = ctx.phase, ctx.turn
    if isinstance(phase, Inferring):
        # The store refused a write: nothing more of this response is kept.
        inference.disarm(ctx, phase)
        ctx.out.append(CancelInference(inference_id=phase.inference_id))
        ctx.out.append(Emit(event=done_error(message)))
        ctx.phase = Passing()
    _end_compaction(ctx, error=message)
    turn.pending_error = message
    turn.failing = True
    # Calls with a durable batch entry (a batch the load found, or one under way) are not
    # stranded: the batch resumes them later (answering one here would answer it twice).
    dispatched = list(turn.resume.calls) if isinstance(turn.resume, Dispatched) else []
    if turn.batch is not None:
        dispatched.extend(turn.batch.calls)
    turn.resume = None
    if not turn.blocked:
        stranded = undispatched_calls(ctx.mirror.records, dispatched)
        if stranded:
            ctx.commit(ctx.answer(stranded, FAILED_TURN_CALL))
            return Outcome.WAITING
    return Outcome.TURN_OVER


def abort(ctx: LoopContext) -> Outcome:
    """Cancel the whole turn; never wait for a stream or a tool (invariant I24). ``DONE``:
    the turn ends at the next decision."""
    turn = ctx.turn
    if not ctx.running or turn.aborted:
        return Outcome.WAITING
    turn.aborted = True
    ctx.requests.turn = False
    retry.cancel(ctx)  # a backoff under way ends now; the turn ends at the next decision
    phase = ctx.phase
    if isinstance(phase, Inferring):
        inference.flush_held(ctx, phase)  # finished blocks stay in the history
        ctx.out.append(CancelInference(inference_id=phase.inference_id))
        ctx.out.append(Emit(event=DONE_CANCELLED))
        turn.cancel_emitted = True
        ctx.phase = Passing()
        ids = ctx.ids(inference=True)
        if ctx.hooked("after_inference_transact"):
            # The cancelled response's end: its blocks are committed (above); the hook runs
            # in a transaction of its own, behind them.
            end = LifecycleHook(hook="after_inference_transact", ids=ids, state="cancelled")
            ctx.commit(LifecycleEdge(hooks=(end,)))
        ctx.out.append(Observe(hook="after_inference", state="cancelled", ids=ids))
        calls = phase.response.client_calls
        if calls:
            ctx.commit(ctx.answer(calls, ABORTED_CALL))
    tools.abandon(ctx)
    tools.pump_results(ctx)
    if isinstance(ctx.phase, Compacting):
        _end_compaction(ctx, error=ABORTED_COMPACTION)
    elif ctx.requests.compaction:
        ctx.requests.compaction = False
        ctx.out.append(CompactionResolved(error=ABORTED_COMPACTION))
    return Outcome.DONE


def _cancel_compaction(ctx: LoopContext) -> None:
    """Cancel a running compaction (if any), keeping its request for a later attempt."""
    phase = ctx.phase
    if isinstance(phase, Compacting):
        ctx.out.append(CancelCompaction(compaction_id=phase.compaction_id))
        ctx.phase = Passing()


def _end_compaction(ctx: LoopContext, *, error: str) -> None:
    """Cancel a running compaction (if any) and answer its request with ``error``."""
    phase = ctx.phase
    if isinstance(phase, Compacting):
        ctx.out.append(CancelCompaction(compaction_id=phase.compaction_id))
        compaction.resolve(ctx, error=error)
