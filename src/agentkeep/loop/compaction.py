"""The compaction stage (spec §3.10): stage the owed fact, summarise, replace the history."""

from __future__ import annotations

from agentkeep.loop import retry, transitions
from agentkeep.loop.context import LoopContext
from agentkeep.loop.effects import CompactionResolved, StartCompaction
from agentkeep.loop.events import CompactionFinished
from agentkeep.loop.phases import Compacting, Passing
from agentkeep.loop.plans import ReplaceWithCompaction, StageOwed
from agentkeep.loop.view import tail_owes_answer
from agentkeep.types import CompactionCancelled, CompactionCompleted


def start(ctx: LoopContext) -> None:
    if ctx.children:
        return  # the model session must be free of earlier streams first
    if not ctx.records:
        # Nothing to summarise: an empty conversation stays empty (no summary of 0
        # messages, no provider call); the waiter is answered as for a done compaction.
        resolve(ctx, error=None)
        transitions.decide(ctx)
        return
    compaction_id = ctx.new_id()
    ctx.phase = Compacting(compaction_id=compaction_id, through=len(ctx.records))
    ctx.children.add(compaction_id)
    if ctx.owed is None or ctx.owed.stage != "compaction":
        # A response cut short stays marked open: a crash before the replacement lands must
        # still continue it (docs/lifecycle.md).
        cut = ctx.owed is not None and ctx.owed.response_open
        ctx.commit(StageOwed(owed=ctx.owed_now("compaction", response_open=cut)))
    ctx.out.append(
        StartCompaction(
            compaction_id=compaction_id,
            messages=ctx.views.view(ctx.records),
            settings=ctx.settings,
        )
    )


def finished(ctx: LoopContext, event: CompactionFinished) -> None:
    ctx.children.discard(event.compaction_id)
    phase = ctx.phase
    if not isinstance(phase, Compacting) or event.compaction_id != phase.compaction_id:
        transitions.decide(ctx)
        return
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
                or tail_owes_answer(ctx.records[: phase.through]),
                owed=ctx.owed_for_inference(),
                answer_now=ctx.turn.needs_inference,
            )
        )
        return
    if isinstance(outcome, CompactionCancelled):
        resolve(ctx, error=None)
    elif retry.should_retry(ctx):
        # Retrying forever: the request (and its waiter) stays; the next pass compacts again.
        retry.back_off(ctx, then="pass")
        return
    else:
        resolve(ctx, error=outcome.message)
    transitions.decide(ctx)


def resolve(ctx: LoopContext, *, error: str | None) -> None:
    """The compaction request is answered (done, cancelled or failed); the stage ends."""
    ctx.compaction_requested = False
    if isinstance(ctx.phase, Compacting):
        ctx.phase = Passing()
    ctx.out.append(CompactionResolved(error=error))
