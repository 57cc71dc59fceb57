"""Retrying forever (seed 001 ``retryForever``): a provider error, a failed compaction or a
fatal run-stage failure waits out a bounded exponential backoff and tries again, instead of
leaving a failure note and giving up after ``max_failed_turns``.

The wait is an effect (``StartTimer``) the shell carries out with a cancellable timer and
answers with ``TimerFired``: the loop's thread never sleeps, so an abort, a close or a
shutdown arriving during the wait takes effect at once (``cancel``). Between attempts the
outstanding durable stage (the owed fact) stays as it is, so committed tool effects are never
replayed, no failure note is appended, and the turn stays ``running``.
"""

from __future__ import annotations

from typing import Literal

from agentkeep.loop import transitions
from agentkeep.loop.context import LoopContext, RetryPolicy
from agentkeep.loop.effects import CancelTimer, LoadState, StartTimer
from agentkeep.loop.phases import BackingOff, Loading, Passing

__all__ = ["RetryPolicy", "back_off", "cancel", "fired", "should_retry", "succeeded"]


def should_retry(ctx: LoopContext) -> bool:
    """Whether a failure now is retried rather than given up on: only when the system retries
    forever and nothing (abort, shutdown, close, a blocked write) has stopped the run."""
    turn = ctx.turn
    stopped = turn.aborted or turn.blocked or ctx.shutdown or ctx.retry_stopped
    return ctx.config.retry is not None and not stopped


def back_off(ctx: LoopContext, *, then: Literal["pass", "load"]) -> None:
    """Wait before the next attempt; ``then``: what resumes (the pass, or the turn's load)."""
    policy = ctx.config.retry
    assert policy is not None  # only called after should_retry
    ctx.retry_attempts += 1
    timer_id = ctx.new_id()
    ctx.phase = BackingOff(timer_id=timer_id, then=then)
    ctx.out.append(StartTimer(timer_id=timer_id, seconds=policy.delay(ctx.retry_attempts)))


def succeeded(ctx: LoopContext) -> None:
    """An attempt got through: the next failure waits the initial delay again."""
    ctx.retry_attempts = 0


def fired(ctx: LoopContext, timer_id: str) -> None:
    phase = ctx.phase
    if not isinstance(phase, BackingOff) or phase.timer_id != timer_id:
        return  # a cancelled wait's late tick
    if phase.then == "load":
        ctx.phase = Loading()
        ctx.out.append(LoadState(records=not ctx.mirror_valid))
        return
    ctx.phase = Passing()
    transitions.decide(ctx)


def cancel(ctx: LoopContext) -> bool:
    """End a wait (abort, close, shutdown); True if one was cancelled. The caller decides."""
    phase = ctx.phase
    if not isinstance(phase, BackingOff):
        return False
    ctx.out.append(CancelTimer(timer_id=phase.timer_id))
    if phase.then == "load":
        # Nothing was read: the run cannot know it owes nothing, so it may not settle.
        ctx.turn.blocked = True
    ctx.phase = Passing()
    return True
