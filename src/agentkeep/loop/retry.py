"""Retrying forever (docs/decisions.md): a provider error, a failed compaction or a
fatal run-stage failure waits out a bounded exponential backoff and tries again, instead of
leaving a failure note and giving up after ``max_failed_turns``.

The wait is an effect (``StartTimer``) the shell carries out with a cancellable timer and
answers with ``TimerFired``: the loop's thread never sleeps, so an abort, a close or a
shutdown arriving during the wait takes effect at once (``cancel``). Between attempts the
outstanding durable stage (the owed fact) stays as it is, so committed tool effects are never
replayed, no failure note is appended, and the turn stays ``running``.

Provider disablement stops it too: once the run's provider is removed from the
registry (``Providers.remove``, told at once as ``ProviderRemoved``; a request that finds its
provider unregistered tells the same), the run's failures are no longer retried. A wait under
way ends at once and the next attempt is made now; it fails (the provider is gone) and takes
the give-up path of a run without ``retry_forever``: the failure note, the turn failed, the
run stopped with the work still owed, so the next start or message (with the provider added
back) answers it. The next run retries forever again.
"""

from __future__ import annotations

from typing import Literal

from agentkeep.loop.context import LoopContext, RetryPolicy
from agentkeep.loop.effects import CancelTimer, LoadState, StartTimer
from agentkeep.loop.outcomes import Outcome
from agentkeep.loop.phases import BackingOff, Loading, Passing

__all__ = [
    "RetryPolicy",
    "back_off",
    "cancel",
    "fired",
    "provider_removed",
    "should_retry",
    "succeeded",
]


def should_retry(ctx: LoopContext) -> bool:
    """Whether a failure now is retried rather than given up on: only when the system retries
    forever and nothing (abort, shutdown, close, a blocked write, the removal of the run's
    provider) has stopped the run."""
    turn = ctx.turn
    stopped = turn.aborted or turn.blocked or ctx.requests.shutdown or ctx.requests.retry_stopped
    return ctx.config.retry is not None and not (stopped or ctx.run.provider_disabled)


def back_off(ctx: LoopContext, *, then: Literal["pass", "load"]) -> None:
    """Wait before the next attempt; ``then``: what resumes (the pass, or the turn's load)."""
    policy = ctx.config.retry
    assert policy is not None  # only called after should_retry
    ctx.failures.retry_attempts += 1
    timer_id = ctx.new_id()
    ctx.phase = BackingOff(timer_id=timer_id, then=then)
    ctx.out.append(StartTimer(timer_id=timer_id, seconds=policy.delay(ctx.failures.retry_attempts)))


def succeeded(ctx: LoopContext) -> None:
    """An attempt got through: the next failure waits the initial delay again."""
    ctx.failures.retry_attempts = 0


def fired(ctx: LoopContext, timer_id: str) -> Outcome:
    """A wait ended: the turn's load is asked again (``WAITING``), or the pass goes on
    (``DONE``)."""
    phase = ctx.phase
    if not isinstance(phase, BackingOff) or phase.timer_id != timer_id:
        return Outcome.WAITING  # a cancelled wait's late tick
    if phase.then == "load":
        ctx.phase = Loading()
        ctx.out.append(LoadState(records=not ctx.mirror.valid))
        return Outcome.WAITING
    ctx.phase = Passing()
    return Outcome.DONE


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


def provider_removed(ctx: LoopContext, provider_id: str) -> Outcome:
    """The run's provider was removed (or a request found it unregistered): stop retrying.
    A wait under way is cut short — the next attempt is made now and fails on the give-up
    path — so the agent does not wait out a backoff for a provider that no longer exists.
    Another provider's removal, or one while no run is under way, changes nothing."""
    if provider_id != ctx.mirror.settings.provider or not ctx.running:
        return Outcome.WAITING
    ctx.run.provider_disabled = True
    phase = ctx.phase
    if not isinstance(phase, BackingOff):
        return Outcome.WAITING
    ctx.out.append(CancelTimer(timer_id=phase.timer_id))
    return fired(ctx, phase.timer_id)
