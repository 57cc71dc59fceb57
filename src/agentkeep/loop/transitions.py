"""Every transition of the loop, by event and by stage — the place to hold
against the loop's rules (docs/architecture.md, "Inside the loop").

``handle`` dispatches each event (one ``match``); the functions below it move the run through
its stages (:mod:`agentkeep.loop.phases`):

    Idle ─start/work/compact─▶ Loading ─Loaded─▶ InHook(before_turn) ─▶ Passing
    Idle ─consumed at acceptance─▶ Passing (its reload and consumption done: loop.offers)
    Passing ─decide─▶ Passing (resume a batch, consume steering/send/notices)
                    ├▶ InHook(prepare_inference) ─answered─▶ Passing (loop.preparation)
                    ├▶ Compacting ─outcome/replacement landed─▶ Passing
                    ├▶ Inferring ─done─▶ Passing (a batch dispatches: its results land here)
                    └▶ (nothing left, failing, aborted or shut down) end_turn
    end_turn ─▶ InHook(after_turn) ─▶ Loading (a turn was requested) | InHook(after_agent_loop)
    InHook(after_agent_loop) ─▶ Loading (actions reopened the loop: before_agent_loop again)
                                 | Settling | Idle
    Settling ─landed─▶ Idle | Loading (work arrived while settling)

Commit outcomes are in :mod:`agentkeep.loop.landing`; failures, the store's unknown
outcome and abort in :mod:`agentkeep.loop.interruptions`. Only this module moves the run on:
a step module reports what happened (:class:`~agentkeep.loop.outcomes.Outcome`) and
:func:`go_on` acts on it, so no step imports this module.
"""

from __future__ import annotations

from typing import assert_never

from agentkeep.loop import (
    compaction,
    inference,
    interruptions,
    landing,
    loading,
    offers,
    preparation,
    retry,
    settlement,
    tools,
)
from agentkeep.loop.context import LoopContext, Run
from agentkeep.loop.effects import (
    CompactionResolved,
    Emit,
    LoadState,
    LoopStopped,
    Observe,
    RunHook,
)
from agentkeep.loop.events import (
    AbortRequested,
    AcceptanceOutcomeUnknown,
    ChildStopped,
    CommitFailed,
    CommitLanded,
    CompactionFinished,
    CompactRequested,
    ConsumedAtAcceptance,
    Event,
    HookFinished,
    Loaded,
    LoadFailed,
    ProviderRemoved,
    ShutdownRequested,
    Start,
    StopRetrying,
    StreamEventArrived,
    TimerFired,
    ToolFinished,
    ToolLifetimes,
    WorkAccepted,
)
from agentkeep.loop.outcomes import Outcome
from agentkeep.loop.phases import (
    Compacting,
    Dispatched,
    Idle,
    InHook,
    Loading,
    Passing,
    Turn,
)
from agentkeep.loop.plans import (
    AppendBlock,
    AppendFailureNote,
    ConsumeQueue,
    LifecycleEdge,
    LifecycleHook,
    Plan,
    PlanResult,
    Snapshot,
)
from agentkeep.loop.texts import ABORTED_COMPACTION
from agentkeep.loop.view import ends_with_own_message
from agentkeep.types import DONE_CANCELLED, done_error
from agentkeep.types.records import QueueName


def handle(ctx: LoopContext, event: Event) -> None:
    """Take one event; its effects are appended to ``ctx.out``."""
    match event:
        # The events of every step first: a match tries its cases in order (these four
        # classes match no other case).
        case StreamEventArrived(inference_id=inference_id, event=stream_event):
            inference.stream_event(ctx, inference_id, stream_event)
        case CommitLanded(plan=plan, value=value):
            commit_landed(ctx, plan, value)
        case HookFinished():
            hook_finished(ctx, event)
        case ChildStopped(child_id=child_id):
            ctx.children.discard(child_id)
            decide(ctx)
        case Start(explicit=explicit):
            start(ctx, explicit=explicit)
        case WorkAccepted(message=message, notice=notice):
            if message is not None:
                tools.steer(ctx, message)  # before the mirror takes it: is it new?
            landing.accept(ctx, message, notice)
            request_turn(ctx)
        case ConsumedAtAcceptance(plan=plan, value=value):
            go_on(ctx, offers.consumed_at_acceptance(ctx, plan, value))
        case AcceptanceOutcomeUnknown():
            offers.acceptance_outcome_unknown(ctx)
        case CompactRequested():
            ctx.requests.compaction = True
            request_turn(ctx)
        case AbortRequested():
            go_on(ctx, interruptions.abort(ctx))
        case ShutdownRequested():
            shut_down(ctx)
        case StopRetrying():
            stop_retrying(ctx)
        case ProviderRemoved(provider_id=provider_id):
            go_on(ctx, retry.provider_removed(ctx, provider_id))
        case TimerFired(timer_id=timer_id):
            # A held block's bound (the response goes on), or a retry's backoff.
            if not inference.hold_expired(ctx, timer_id):
                go_on(ctx, retry.fired(ctx, timer_id))
        case Loaded(snapshot=snapshot):
            loaded(ctx, snapshot)
        case LoadFailed() if retry.should_retry(ctx):
            retry.back_off(ctx, then="load")  # the same turn reads the store again
        case LoadFailed(message=message):
            load_failed(ctx, message)
        case CommitFailed(message=message, outcome_unknown=True):
            go_on(ctx, interruptions.continue_from_store(ctx, message))
        case CommitFailed(plan=plan, message=message):
            go_on(ctx, interruptions.commit_failed(ctx, plan, message))
        case ToolFinished(internal_id=internal_id, result=result):
            tools.finished(ctx, internal_id, result)
            decide(ctx)
        case ToolLifetimes():
            tools.note_lifetimes(ctx, event)
            decide(ctx)
        case CompactionFinished():
            go_on(ctx, compaction.finished(ctx, event))


def go_on(ctx: LoopContext, outcome: Outcome) -> None:
    """Take the run on from what a step reports — the one place a step's end moves it."""
    match outcome:
        case Outcome.WAITING:
            pass
        case Outcome.DONE:
            decide(ctx)
        case Outcome.TURN_OVER:
            end_turn(ctx)
        case Outcome.RUN_BLOCKED:
            stop(ctx, settled=False)
        case Outcome.MEMORY_LOST:
            begin_turn(ctx)
        case Outcome.MEMORY_LOST_RETRYING:
            begin_turn(ctx, backoff=True)
        case Outcome.RUN_WANTED:
            request_turn(ctx)
        case Outcome.IDS_DURABLE:
            open_turn(ctx)
        case Outcome.TURN_CLOSED:
            run_after_turn(ctx)
        case Outcome.LOOP_CLOSED:
            run_after_agent_loop(ctx)
        case Outcome.SETTLED:
            stop(ctx, settled=True)
        case Outcome.NOT_SETTLED:
            if may_continue(ctx):
                begin_turn(ctx)  # work arrived while settling: it is owed
            else:
                stop(ctx, settled=False)
        case _:  # pragma: no cover - mypy proves every outcome is handled
            assert_never(outcome)


def commit_landed(ctx: LoopContext, plan: Plan, value: PlanResult) -> None:
    """A commit landed: the mirror follows (``landing.landed``), the run goes on from what it
    learned, the next queued commit goes out, then the turn's next step."""
    go_on(ctx, landing.landed(ctx, plan, value))
    ctx.pump_commits()
    if isinstance(plan, AppendFailureNote):
        end_turn(ctx)
    elif isinstance(plan, AppendBlock):
        inference.maybe_finish(ctx)
    decide(ctx)


# -- runs and turns ------------------------------------------------------------


def start(ctx: LoopContext, *, explicit: bool) -> None:
    if explicit:
        # A caller named this agent: continue whatever the durable state owes, including a
        # trailing question this instance already looked at.
        ctx.mirror.resume_checked = False
    request_turn(ctx)


def shut_down(ctx: LoopContext) -> None:
    """Graceful: a backoff ends, a batch drains, nothing new starts (the owed fact kept)."""
    ctx.requests.shutdown = True
    retry.cancel(ctx)
    tools.drain(ctx)
    decide(ctx)


def stop_retrying(ctx: LoopContext) -> None:
    ctx.requests.retry_stopped = True
    if retry.cancel(ctx):
        # Closing during a backoff: stop now, the owed fact kept (nothing settles).
        ctx.requests.shutdown = True
        decide(ctx)


def load_failed(ctx: LoopContext, message: str) -> None:
    """The turn's load failed (and is not retried): the run fails, its owed fact kept."""
    ctx.phase = Passing()
    ctx.out.append(Emit(event=done_error(message)))
    ctx.run.failure = message
    ctx.failures.turns += 1
    finish_run(ctx)


def request_turn(ctx: LoopContext) -> None:
    if ctx.running:
        ctx.requests.turn = True
        decide(ctx)
        return
    ctx.requests.turn = True
    # The loop's id is settled at its first load (the owed fact's, after a restart), and
    # before_agent_loop is told it then (docs/lifecycle.md).
    ctx.lifecycle.loop_id = None
    ctx.lifecycle.settlement_id = None
    ctx.run = Run(hook_due=True, loop_opening=True)
    begin_turn(ctx)


def begin_turn(ctx: LoopContext, *, backoff: bool = False) -> None:
    """A new turn reads the durable state — at once, or (``backoff``) after a retry's wait."""
    ctx.turn = Turn()
    ctx.requests.turn = False
    ctx.lifecycle.turn_id = None  # settled at the load (``loading.lifecycle_ids``)
    ctx.lifecycle.inference_id = None
    ctx.phase = Loading()
    if backoff:
        retry.back_off(ctx, then="load")
        return
    ctx.out.append(LoadState(records=not ctx.mirror.valid))


def loaded(ctx: LoopContext, snapshot: Snapshot) -> None:
    go_on(ctx, loading.loaded(ctx, snapshot))


def open_turn(ctx: LoopContext) -> None:
    """The loaded turn's ids are durable: before_agent_loop (a run's first turn), then
    before_turn — or, after an abort during startup, straight to the turn's end."""
    ctx.run.loop_opening = False  # its transactional hook ran in the opening commit
    if ctx.run.hook_due:
        ctx.run.hook_due = False
        ctx.out.append(Observe(hook="before_agent_loop", ids=ctx.ids()))
    if ctx.turn.aborted:
        decide(ctx)  # an abort during startup: the turn never reaches the model
        return
    ctx.phase = InHook("before_turn")
    ctx.out.append(
        RunHook(hook="before_turn", context_tokens=ctx.mirror.context_tokens, ids=ctx.ids())
    )


def hook_finished(ctx: LoopContext, event: HookFinished) -> None:
    ctx.phase = Passing()
    if event.hook == "prepare_inference":
        preparation.answered(ctx, compact=event.compact)
        decide(ctx)  # a compaction it asked for runs first; then it is asked again
        return
    if event.compact and not ctx.turn.aborted:
        ctx.requests.compaction = True
    wants_more = ctx.requests.turn or ctx.requests.compaction
    if event.hook == "before_turn":
        decide(ctx)
    elif wants_more and may_continue(ctx):
        if event.hook == "after_agent_loop":
            # Its actions reopen the loop: every loop is bracketed by before_agent_loop and
            # after_agent_loop (``loops``); the loop id stays until the run settles. Both
            # before_agent_loop hooks are told the reopening turn's ids, once they are durable.
            ctx.run.hook_due = ctx.run.loop_opening = True
        begin_turn(ctx)  # after_turn: a turn was requested; after_agent_loop: actions reopen
    elif event.hook == "after_turn":
        ctx.phase = InHook("after_agent_loop")
        if ctx.hooked("after_agent_loop_transact"):
            # The loop's closing commit: after_agent_loop waits for it (``LOOP_CLOSED``).
            ctx.turn.closing = True
            hook = LifecycleHook(hook="after_agent_loop_transact", ids=ctx.ids())
            ctx.commit(LifecycleEdge(hooks=(hook,)))
            return
        run_after_agent_loop(ctx)
    else:
        finish_run(ctx)


def run_after_agent_loop(ctx: LoopContext) -> None:
    """Ask for ``after_agent_loop`` (its actions dropped if the run may not continue)."""
    ctx.turn.closing = False
    drop = not may_continue(ctx)
    ctx.out.append(RunHook(hook="after_agent_loop", drop_actions=drop, ids=ctx.ids()))


def may_continue(ctx: LoopContext) -> bool:
    retrying = ctx.config.retry is not None and not ctx.run.provider_disabled
    stuck = ctx.failures.turns >= ctx.config.max_failed_turns and not retrying
    return not (ctx.turn.aborted or ctx.turn.blocked or ctx.requests.shutdown or stuck)


def finish_run(ctx: LoopContext) -> None:
    """Settle if nothing is owed; otherwise stop with the owed fact kept."""
    turn = ctx.turn
    if turn.blocked or ctx.requests.shutdown or ctx.failures.turns >= ctx.config.max_failed_turns:
        stop(ctx, settled=False)
    elif ctx.run.failure is not None:
        # An unrecovered failure left its note: the question was never answered, so the
        # owed fact stays and the next start (a restart included) answers it.
        stop(ctx, settled=False)
    elif turn.aborted and ctx.mirror.has_input():
        # Decision (docs/decisions.md): input left queued after an abort keeps the
        # owed fact, so a restarted system resumes it instead of stranding it.
        stop(ctx, settled=False)
    elif turn.settled_early:
        stop(ctx, settled=True)  # the response's own transaction already settled
    else:
        settlement.settle(ctx)


def stop(ctx: LoopContext, *, settled: bool) -> None:
    ctx.phase = Idle()
    error = ctx.run.failure
    if settled:
        ctx.mirror.owed = None
        ctx.failures.turns = 0
    if ctx.requests.compaction and not ctx.requests.shutdown:
        ctx.requests.compaction = False
        ctx.out.append(CompactionResolved(error=ABORTED_COMPACTION))
    ctx.out.append(LoopStopped(settled=settled, error=error))
    if settled:
        ids = ctx.ids(settlement=True)
        ctx.out.append(Observe(hook="after_agent_settled", error=error, ids=ids))
    if ctx.turn.aborted and ctx.requests.turn and not ctx.requests.shutdown:
        # A turn asked for after the abort (a message accepted, or a wake, while the aborted
        # work unwound): the abort dropped the requests made before it, not the ones after
        # (queued input drains "on the next start/message").
        request_turn(ctx)


# -- the pass --------------------------------------------------------------------


def decide(ctx: LoopContext) -> None:
    """Take the next step of the turn, if nothing is in flight."""
    if not may_decide(ctx):
        return
    turn = ctx.turn
    if turn.aborted or ctx.requests.shutdown or turn.failing:
        if not (turn.aborted and tools.answer_undispatched(ctx)):
            end_turn(ctx)
    elif turn.resume is not None:
        resumed = isinstance(turn.resume, Dispatched)
        tools.start_batch(ctx, turn.resume.calls, resumed=resumed)
    elif ctx.requests.compaction:
        go_on(ctx, compaction.start(ctx))
    elif not consume_next(ctx):
        if not turn.needs_inference:
            end_turn(ctx)
        elif not ctx.children:  # earlier streams and aborted tools unwind first
            inference.start(ctx)


def may_decide(ctx: LoopContext) -> bool:
    """Only in the pass (or while a compaction's replacement commits), never once the turn
    is ending, with a commit in flight, or with a batch still running."""
    if ctx.turn.ending or ctx.turn.opening or not ctx.commits.idle():
        return False
    phase = ctx.phase
    if not (isinstance(phase, Passing) or (isinstance(phase, Compacting) and phase.summarised)):
        return False
    return ctx.turn.batch is None or ctx.turn.batch.done


def consume_next(ctx: LoopContext) -> bool:
    """One step of the pass's consumption; True if it committed something to wait for.

    Steering is consumed at every stop and outranks send; send only when nothing is
    owed; then ``prepare_inference`` (which may compact first: ``loop.preparation``), and
    the notices last, in the inference stage's opening transaction, right before the
    inference that sees them (invariant I5; docs/notices.md).
    """
    turn = ctx.turn
    if turn.step == "steering":
        turn.step = "send"
        if ctx.mirror.queued["steering"]:
            ctx.commit(_consume(ctx, "steering"))
            return True
    if turn.step == "send":
        turn.step = "notices"
        if not turn.needs_inference and ctx.mirror.queued["send"]:
            ctx.commit(_consume(ctx, "send"))
            return True
    if turn.step == "notices":
        # Queued input has joined: a possible request is prepared first (the step stays
        # here until the hook answered and any compaction it asked for landed).
        if preparation.ask(ctx, possible=turn.needs_inference or bool(ctx.mirror.notices)):
            return True
        turn.step = "infer"
        # The inference stage's transaction: a request never ends with the model's own
        # message, so a response whose completed blocks end the conversation (after a
        # restart, a notice that reopened it, or a retry) is continued after the durable
        # notice "Continue from where you left off.", ahead of the queued notices.
        continues = ends_with_own_message(ctx.mirror.records) and (
            turn.needs_inference or ctx.mirror.notices
        )
        if ctx.mirror.notices or continues:
            ctx.commit(inference.open_stage(ctx, continues=bool(continues)))
            return True
    return False


def _consume(ctx: LoopContext, queue: QueueName) -> ConsumeQueue:
    return ConsumeQueue(
        queue=queue,
        mode=ctx.config.modes[queue],
        defaults=ctx.config.defaults,
        owed=ctx.owed_for_inference(),
        call_id=ctx.new_id(),  # for a tool request, if the batch holds one
    )


def end_turn(ctx: LoopContext) -> None:
    """Leave a failure note if one is owed, then ask for ``after_turn``."""
    turn = ctx.turn
    if turn.ending:
        return
    owes_answer = turn.needs_inference or ctx.mirror.has_input()
    if turn.aborted and not turn.cancel_emitted and owes_answer:
        turn.cancel_emitted = True
        ctx.out.append(Emit(event=DONE_CANCELLED))
    note = turn.pending_error
    may_note = turn.loaded and not turn.blocked
    if note is not None and may_note and not ctx.mirror.open_calls.calls(ctx.mirror.records):
        # Only an unrecovered failure leaves a trace, and never behind an open call.
        turn.pending_error = None
        ctx.run.failure = note
        ctx.failures.turns += 1
        ctx.commit(AppendFailureNote(message=note))
        return
    if note is not None:
        # A turn that failed where no note may be written (before its load, behind an open
        # call) failed all the same: it counts toward ``max_failed_turns``. Otherwise a store
        # refusing every write restarts turn after turn at once, for as long as it refuses.
        turn.pending_error = None
        ctx.run.failure = ctx.run.failure or note
        ctx.failures.turns += 1
    elif ctx.run.failure is None:
        ctx.failures.turns = 0
    turn.ending = True
    ctx.phase = InHook("after_turn")
    if ctx.hooked("after_turn_transact"):
        # The turn's closing commit: after_turn waits for it to land (``TURN_CLOSED``).
        turn.closing = True
        hook = LifecycleHook(
            hook="after_turn_transact",
            ids=ctx.ids(),
            context_tokens=ctx.mirror.context_tokens,
            aborted=turn.aborted,
        )
        ctx.commit(LifecycleEdge(hooks=(hook,)))
        return
    run_after_turn(ctx)


def run_after_turn(ctx: LoopContext) -> None:
    """Ask for ``after_turn`` (an aborted turn's actions dropped)."""
    turn = ctx.turn
    turn.closing = False
    ctx.out.append(
        RunHook(
            hook="after_turn",
            context_tokens=ctx.mirror.context_tokens,
            aborted=turn.aborted,
            drop_actions=turn.aborted,
            ids=ctx.ids(),
        )
    )
