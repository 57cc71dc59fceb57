"""The compaction stage: stage the owed fact, summarise, replace the history."""

from __future__ import annotations

from agentkeep.loop import preparation, retry
from agentkeep.loop.context import LoopContext
from agentkeep.loop.effects import CompactionResolved, Observe, StartCompaction
from agentkeep.loop.events import CompactionFinished
from agentkeep.loop.outcomes import Outcome
from agentkeep.loop.phases import Compacting, Passing
from agentkeep.loop.plans import ReplaceWithCompaction, StageOwed
from agentkeep.loop.view import tail_owes_answer
from agentkeep.types import CompactionCancelled, CompactionCompleted


def start(ctx: LoopContext) -> Outcome:
    """Start the requested compaction; ``DONE`` if there was nothing to summarise."""
    if ctx.children:
        return Outcome.WAITING  # the model session must be free of earlier streams first
    if not ctx.mirror.records:
        # Nothing to summarise: an empty conversation stays empty (no summary of 0
        # messages, no provider call); the waiter is answered as for a done compaction.
        resolve(ctx, error=None)
        return Outcome.DONE
    compaction_id = ctx.new_id()
    ctx.phase = Compacting(compaction_id=compaction_id, through=len(ctx.mirror.records))
    ctx.children.add(compaction_id)
    if ctx.mirror.owed is None or ctx.mirror.owed.stage != "compaction":
        # A response cut short stays marked open: a crash before the replacement lands must
        # still continue it (docs/lifecycle.md).
        cut = ctx.mirror.owed is not None and ctx.mirror.owed.response_open
        ctx.commit(StageOwed(owed=ctx.owed_now("compaction", response_open=cut)))
    # Each attempt's provider call is announced first (the history KV is still the old one).
    ctx.out.append(Observe(hook="before_compaction", ids=ctx.ids()))
    ctx.out.append(
        StartCompaction(
            compaction_id=compaction_id,
            messages=ctx.mirror.views.view(ctx.mirror.records),
            settings=ctx.mirror.settings,
        )
    )
    return Outcome.WAITING


def finished(ctx: LoopContext, event: CompactionFinished) -> Outcome:
    """A compaction's outcome: its replacement commits (``WAITING``), a retry waits, or the
    request is answered and the pass goes on (``DONE``)."""
    ctx.children.discard(event.compaction_id)
    phase = ctx.phase
    if not isinstance(phase, Compacting) or event.compaction_id != phase.compaction_id:
        return Outcome.DONE
    outcome = event.outcome
    if isinstance(outcome, CompactionCompleted):
        retry.succeeded(ctx)
        ctx.phase = Compacting(phase.compaction_id, phase.through, summarised=True)
        ctx.commit(
            ReplaceWithCompaction(
                through_position=phase.through,
                messages=outcome.messages,
                # The summary says what the history it replaces said: a trailing question
                # an abort left unanswered stays answerable by an explicit start.
                owes_answer=ctx.turn.needs_inference
                or tail_owes_answer(ctx.mirror.records[: phase.through]),
                owed=ctx.owed_for_inference(),
                answer_now=ctx.turn.needs_inference,
            )
        )
        return Outcome.WAITING
    if isinstance(outcome, CompactionCancelled):
        resolve(ctx, error=None)
    elif preparation.compaction_failed(ctx):
        # prepare_inference asked for it: not retried, the request goes on without it.
        resolve(ctx, error=outcome.message)
    elif retry.should_retry(ctx):
        # Retrying forever: the request (and its waiter) stays; the next pass compacts again.
        retry.back_off(ctx, then="pass")
        return Outcome.WAITING
    else:
        resolve(ctx, error=outcome.message)
    return Outcome.DONE


def replaced(ctx: LoopContext) -> None:
    """The replacement committed: ``after_compaction`` observes it, then the request is
    answered (so a waiting ``compact`` returns after the observers ran)."""
    ctx.out.append(Observe(hook="after_compaction", ids=ctx.ids()))
    resolve(ctx, error=None)


def resolve(ctx: LoopContext, *, error: str | None) -> None:
    """The compaction request is answered (done, cancelled or failed); the stage ends."""
    ctx.requests.compaction = False
    ctx.turn.auto_compaction = False
    if isinstance(ctx.phase, Compacting):
        ctx.phase = Passing()
    ctx.out.append(CompactionResolved(error=error))
