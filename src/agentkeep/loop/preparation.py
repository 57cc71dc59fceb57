"""``prepare_inference``: right before a possible provider request, after the queued input
joined the conversation, the features may ask for a compaction first (docs/notices.md).

The hook runs in the pass's notice step, before the inference stage opens (its
``ConsumeNotices`` transaction), so an injected notice and the boundary's notices land after
the replacement. A compaction it asks for runs like any other (``loop.compaction``): its
replacement is written with the inference still owed, in one transaction, so a restart
between them continues the turn. Once the replacement landed the hook is asked again
(``landing``: ``Turn.prepared`` is cleared), against the replacement. A compaction it asked
for that failed is not retried, and not asked for again while the provider's measurement
(the context tokens) is the one that attempt saw (``Failures.compaction_at``). A replacement
nothing has measured yet is not compacted again either (its measurement is None until the
next response), so a hook that always asks cannot compact forever.
"""

from __future__ import annotations

from agentkeep.loop.context import LoopContext
from agentkeep.loop.effects import RunHook
from agentkeep.loop.phases import InHook


def ask(ctx: LoopContext, *, possible: bool) -> bool:
    """Run ``prepare_inference`` for the coming request if it is due (a request is
    ``possible`` and the hook has not answered for it yet); True if it was asked (the pass
    waits for its ``HookFinished``)."""
    turn = ctx.turn
    if not (ctx.config.prepare_inference and possible) or turn.prepared:
        return False
    turn.prepared = True
    ctx.phase = InHook("prepare_inference")
    ctx.out.append(
        RunHook(hook="prepare_inference", context_tokens=ctx.mirror.context_tokens, ids=ctx.ids())
    )
    return True


def answered(ctx: LoopContext, *, compact: bool) -> None:
    """The hook answered: a compaction it asked for is requested (the pass compacts before
    it goes on), unless the turn stops or a failed attempt saw this same measurement."""
    if not compact or ctx.turn.aborted or ctx.turn.failing or ctx.requests.shutdown:
        return
    if ctx.failures.compaction_at == (ctx.mirror.context_tokens,):
        return  # a failed attempt is not repeated on the unchanged measurement
    if not ctx.requests.compaction:
        ctx.requests.compaction = True
        ctx.turn.auto_compaction = True


def compaction_failed(ctx: LoopContext) -> bool:
    """A compaction failed: if ``prepare_inference`` asked for it, remember the measurement
    it saw and return True (it is not retried: the request goes on without it)."""
    if not ctx.turn.auto_compaction:
        return False
    ctx.failures.compaction_at = (ctx.mirror.context_tokens,)
    return True


def replaced(ctx: LoopContext) -> None:
    """A compaction's replacement landed: the coming request is prepared again, against the
    replacement — which is not compacted again until a response measured it."""
    ctx.turn.prepared = False
    ctx.failures.compaction_at = (None,)
