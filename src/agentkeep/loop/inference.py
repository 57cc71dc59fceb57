"""The inference stage: start a provider response, read its stream, judge its end.

Finished blocks are held, briefly: a block an event finished is committed when the next event
arrives (the response goes on), so that the last one rides in the response's finishing commit
(a one-block reply is one commit). The hold is bounded (:func:`hold`): if no event comes
within ``held_block_seconds`` (a provider that finishes a reasoning block and then thinks for
a minute), a timer commits the held blocks on their own. So a finished block is volatile for
at most that bound — a crash after it finds the block durable, the response marked open, and
continues it under a new inference id (``docs/lifecycle.md``).
"""

from __future__ import annotations

import msgspec

from agentkeep.loop import retry
from agentkeep.loop.context import LoopContext
from agentkeep.loop.effects import CancelTimer, Emit, Observe, StartInference, StartTimer
from agentkeep.loop.phases import Inferring, Passing
from agentkeep.loop.plans import (
    AppendBlock,
    ConsumeNotices,
    DispatchBatch,
    FinishResponse,
    LifecycleHook,
    StageOwed,
)
from agentkeep.loop.provider_calls import ProviderCalls, is_private
from agentkeep.loop.texts import ABORTED_CALL, UNDISPATCHED_CALL
from agentkeep.loop.view import continued_blocks, ends_with_own_message
from agentkeep.types import Done, StreamEvent, ToolCallBlock
from agentkeep.types.parts import block_part


def start(ctx: LoopContext) -> None:
    continues = ends_with_own_message(ctx.mirror.records)
    if continues or (ctx.opens_every_stage() and not ctx.stage_open()):
        # Never a request that ends with the model's own message: the inference stage's
        # transaction appends "Continue from where you left off." first (the pass's notice
        # step normally has; this is the same rule for any path that skipped it). A feature
        # supplying notices at the inference boundary, or overriding
        # before_inference_transact, gets that transaction for every request: it is the
        # request's opening commit (docs/notices.md, docs/hooks.md).
        ctx.commit(open_stage(ctx, continues=continues))
        return
    inference_id = ctx.usable_inference_id()
    if inference_id is None:
        # The request's id is written with the owed work before its first hook is told it
        # and is decided again once this lands.
        ctx.commit(StageOwed(owed=ctx.owed_for_inference()))
        return
    ctx.lifecycle.inference_id = ctx.lifecycle.last_request_id = inference_id
    ctx.phase = Inferring(
        inference_id=inference_id,
        continued=continued_blocks(ctx.mirror.records),
        provider_calls=ProviderCalls(policy=ctx.config.provider_tools),
    )
    ctx.children.add(inference_id)
    ctx.turn.step = "steering"
    ctx.turn.prepared = False  # the next request is prepared afresh
    ctx.out.append(Observe(hook="before_inference", ids=ctx.ids(inference=True)))
    ctx.out.append(
        StartInference(
            inference_id=inference_id,
            messages=ctx.mirror.views.view(ctx.mirror.records),
            settings=ctx.mirror.settings,
        )
    )


def open_stage(ctx: LoopContext, *, continues: bool) -> ConsumeNotices:
    """The inference stage's opening transaction — the request's one opening commit. It
    names the request (``owed``: the id already owed if still usable, a fresh one if an
    earlier stage opened), appends the stage's notices and runs, last, the request's
    ``before_inference_transact`` told that same id; the request is made under it once the
    commit landed, and after a restart without opening the stage again (``stage_open``)."""
    owed = ctx.owed_for_inference()
    hooks: tuple[LifecycleHook, ...] = ()
    if ctx.hooked("before_inference_transact"):
        ids = msgspec.structs.replace(ctx.ids(), inference_id=owed.inference_id)
        hooks = (LifecycleHook(hook="before_inference_transact", ids=ids),)
    return ConsumeNotices(
        owed=owed, continue_response=continues, settings=ctx.mirror.settings, hooks=hooks
    )


def _block_hooks(ctx: LoopContext, inference_id: str) -> tuple[LifecycleHook, ...]:
    """``on_event_transact`` for the blocks a commit appends, if overridden."""
    if not ctx.hooked("on_event_transact"):
        return ()
    ids = msgspec.structs.replace(ctx.ids(), inference_id=inference_id)
    return (LifecycleHook(hook="on_event_transact", ids=ids),)


def stream_event(ctx: LoopContext, inference_id: str, event: StreamEvent) -> None:
    phase = ctx.phase
    if not isinstance(phase, Inferring) or inference_id != phase.inference_id:
        return  # a cancelled response's leftovers: its terminal event was already given
    if phase.provider_calls.observe(event):  # a hidden server call's events are not observed
        ctx.out.append(Emit(event=event))
    if not isinstance(event, Done):
        flush_held(ctx, phase)
    phase.held.extend(phase.response.feed(event))
    if phase.response.done is None:
        hold(ctx, phase)
    else:
        disarm(ctx, phase)  # the held blocks ride in the finishing commit
    maybe_finish(ctx)


def hold(ctx: LoopContext, phase: Inferring) -> None:
    """Bound how long the held blocks wait for the next event: a timer (``StartTimer``,
    ``held_block_seconds``) commits them on their own if it fires first (:func:`hold_expired`);
    the next event cancels it (``flush_held``). With a bound of 0 nothing is held."""
    if not phase.held or phase.hold_timer is not None:
        return
    seconds = ctx.config.held_block_seconds
    if seconds <= 0:
        flush_held(ctx, phase)
        return
    phase.hold_timer = ctx.new_id()
    ctx.out.append(StartTimer(timer_id=phase.hold_timer, seconds=seconds))


def hold_expired(ctx: LoopContext, timer_id: str) -> bool:
    """A ``TimerFired``: True if it was this response's hold timer (the held blocks are
    committed now, the response goes on); False for any other timer. A hold timer whose
    blocks went already (the next event came, the response ended or was cut) names no
    response's timer: it does nothing."""
    phase = ctx.phase
    if not isinstance(phase, Inferring) or phase.hold_timer != timer_id:
        return False
    phase.hold_timer = None  # it fired: nothing to cancel
    flush_held(ctx, phase)
    return True


def disarm(ctx: LoopContext, phase: Inferring) -> None:
    """Cancel the hold timer, if one runs (its blocks go another way, or are dropped)."""
    if phase.hold_timer is not None:
        ctx.out.append(CancelTimer(timer_id=phase.hold_timer))
        phase.hold_timer = None


def flush_held(ctx: LoopContext, phase: Inferring) -> None:
    """Commit the blocks the previous event finished (the response goes on), or that waited
    out their bound. The first one marks the owed fact: this request has completed content
    its response has not finished (a restart retires its id and continues the response)."""
    disarm(ctx, phase)
    held, phase.held = phase.held, []
    for block in held:
        private = phase.provider_calls.private_ids((block,))
        owed = None
        if not phase.opened:
            phase.opened = True
            owed = ctx.owed_now("inference", inference_id=phase.inference_id, response_open=True)
        hooks = _block_hooks(ctx, phase.inference_id)
        ctx.commit(AppendBlock(block=block, private_calls=private, owed=owed, hooks=hooks))


def maybe_finish(ctx: LoopContext) -> None:
    phase = ctx.phase
    if not isinstance(phase, Inferring) or phase.response.done is None:
        return
    if not ctx.commits.idle():
        return  # every finished block lands before the response is judged
    response, done = phase.response, phase.response.done
    ctx.phase = Passing()
    ids = ctx.ids(inference=True)
    # Observed as the response ends, before its closing commit: what the observer queues (a
    # steer) is durable by then, so the commit's ``queued`` read finds it and it joins this
    # turn. after_inference_transact runs inside that commit, after it.
    observe = Observe(
        hook="after_inference", state=done.state, tokens=done.tokens, error=done.message, ids=ids
    )
    ctx.out.append(observe)
    measured = done.state in ("normal", "tool_call", "length")
    blocks = tuple(phase.held)
    calls = response.client_calls
    settle = ctx.config.eager_settle and _ends_run(ctx, phase.inference_id, done, calls)
    answers = done.state in ("normal", "length") and not calls
    private = phase.provider_calls.private_ids(response.blocks)
    # The turn's answer is published: a server call kept out of the history is not in it.
    # It is the whole assistant message: a continuation completes the cut responses it
    # continues, whose blocks the user sees before it (docs/turns.md).
    own = tuple(b for b in response.blocks if not is_private(b, private))
    published = phase.continued + own if phase.continued else own
    answer = published if answers else None
    # Its assistant message (the ledger's ``message`` event), when it says something.
    message = published if measured and any(block_part(b) for b in published) else None
    if settle:
        ctx.lifecycle.settlement_id = ctx.lifecycle.settlement_id or ctx.new_id()
    hooks = _block_hooks(ctx, phase.inference_id) if blocks else ()
    if ctx.hooked("after_inference_transact"):
        # The response's closing commit, whatever it holds: the hook runs inside it.
        state, error = done.state, done.message
        end = LifecycleHook(
            hook="after_inference_transact", ids=ids, state=state, tokens=done.tokens, error=error
        )
        hooks = (*hooks, end)
    if hooks or blocks or settle or answers or message or (measured and done.tokens is not None):
        tokens = done.tokens if measured else None
        # Its id is spent. A response that failed right after completed content was cut
        # short, not finished: the content stays marked open (C2), so a restart before the
        # retry's "Continue from where you left off." (or the failure note) lands continues
        # it instead of settling over it. The next request's owed fact clears the mark; until
        # then, behind a failure note, it only keeps the spent id retired.
        owed = ctx.owed_now("inference", response_open=done.state == "error" and bool(blocks))
        ctx.commit(
            FinishResponse(
                blocks=blocks,
                tokens=tokens,
                settle=settle,
                answer=answer,
                message=message,
                private_calls=phase.provider_calls.private_ids(blocks),
                owed=owed,
                hooks=hooks,
            )
        )
    _judge(ctx, done, calls)


def _ends_run(ctx: LoopContext, inference_id: str, done: Done, calls: list[ToolCallBlock]) -> bool:
    """Whether nothing can follow this response in this run (so it may settle now)."""
    turn = ctx.turn
    if done.state not in ("normal", "length") or calls or turn.pending_error is not None:
        return False
    busy = ctx.requests.turn or ctx.requests.compaction or ctx.children - {inference_id}
    return not (
        ctx.mirror.has_input() or busy or turn.aborted or ctx.requests.shutdown or turn.blocked
    )


def _judge(ctx: LoopContext, done: Done, calls: list[ToolCallBlock]) -> None:
    turn = ctx.turn
    if done.state == "error" and retry.should_retry(ctx):
        # Retrying forever: no note, the owed fact stays; the same question is asked again
        # after the backoff (calls of the failed response are answered, never run).
        if calls:
            ctx.commit(ctx.answer(calls, UNDISPATCHED_CALL))
        turn.needs_inference = True
        retry.back_off(ctx, then="pass")
        return
    if done.state == "error":
        turn.pending_error = done.message or "The provider reported an error."
    elif done.state != "cancelled":
        turn.pending_error = None  # a later success recovers silently
        retry.succeeded(ctx)
    turn.needs_inference = False
    if done.state == "tool_call" and calls and not ctx.requests.shutdown:
        pending = tuple(ctx.pending(i, c) for i, c in enumerate(calls))
        turn.asked_by = ctx.lifecycle.inference_id  # the request whose response asked for them
        ctx.commit(DispatchBatch(calls=pending, owed=ctx.owed_now("tools")))
        return
    if calls and not ctx.requests.shutdown:
        text = ABORTED_CALL if done.state == "cancelled" else UNDISPATCHED_CALL
        ctx.commit(ctx.answer(calls, text))
    if done.state == "cancelled" and not turn.aborted:
        turn.aborted = True  # the provider stopped it: the turn stops, queues stay
