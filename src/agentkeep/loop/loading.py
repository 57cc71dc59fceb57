"""The turn's load: mirror the durable state read, find what the turn owes
(a batch to resume, calls stranded by a restart, a question to answer) and settle the run's
lifecycle ids before any hook is told them. :mod:`agentkeep.loop.transitions` opens the turn
once they are durable."""

from __future__ import annotations

import msgspec

from agentkeep.loop.context import LoopContext
from agentkeep.loop.effects import LoadState
from agentkeep.loop.outcomes import Outcome
from agentkeep.loop.phases import Dispatched, Passing, Recorded
from agentkeep.loop.plans import LifecycleHook, Snapshot, StageOwed
from agentkeep.loop.view import ends_in_failure_note, tail_owes_answer
from agentkeep.types.records import OwedWork


def loaded(ctx: LoopContext, snapshot: Snapshot) -> Outcome:
    """Mirror the snapshot and find what the turn owes. ``IDS_DURABLE``: the turn may open
    now; ``WAITING``: the records are read again, or the ids stage first."""
    if snapshot.records is None and snapshot.record_count != len(ctx.mirror.records):
        # The durable conversation is not the one this instance remembers: read it all.
        ctx.mirror.valid = False
        ctx.out.append(LoadState(records=True))
        return Outcome.WAITING
    turn = ctx.turn
    ctx.phase = Passing()
    turn.loaded = True
    if snapshot.records is not None:
        ctx.mirror.records = list(snapshot.records)
        ctx.mirror.valid = True
    ctx.mirror.queued = {
        "steering": [m for m in snapshot.queued if m.queue == "steering"],
        "send": [m for m in snapshot.queued if m.queue == "send"],
    }
    ctx.mirror.notices = list(snapshot.notices)
    ctx.mirror.settings = snapshot.settings or ctx.config.defaults
    ctx.mirror.owed = snapshot.owed
    ctx.mirror.context_tokens = snapshot.context_tokens
    # Recovery: a dispatched batch resumes; calls the history holds without a
    # batch entry never ran and are dispatched fresh; a trailing question is answered.
    if snapshot.pending:
        turn.resume = Dispatched(list(snapshot.pending))
    else:
        stranded = ctx.mirror.open_calls.calls(ctx.mirror.records)
        if stranded:
            turn.resume = Recorded([ctx.pending(i, c) for i, c in enumerate(stranded)])
    if not ctx.mirror.resume_checked:
        ctx.mirror.resume_checked = True
        turn.needs_inference = tail_owes_answer(ctx.mirror.records)
    elif snapshot.owed is not None and ends_in_failure_note(ctx.mirror.records):
        # A failure note is owed an answer for as long as the owed fact stands — also
        # when this instance already looked once (a later run must not settle over it).
        turn.needs_inference = True
    if snapshot.owed is not None and snapshot.owed.response_open:
        # A response was cut after completed content (a crash, or its stream failed): the
        # truncated answer is never final — it is continued while the owed fact stands.
        turn.needs_inference = True
    if lifecycle_ids(ctx, snapshot.owed):
        # The ids are durable before any hook is told them: the turn's hooks
        # wait for the staging commit (``landing.landed``), so a failure of it meets a turn
        # with no hook running — and no hook was told ids that never became durable.
        turn.opening = True
        return Outcome.WAITING
    return Outcome.IDS_DURABLE


def lifecycle_ids(ctx: LoopContext, owed: OwedWork | None) -> bool:
    """Settle the loop's and turn's ids at the turn's load, and write them with the owed
    work before any hook is told them (docs/lifecycle.md).

    A run's first load continues the owed fact's loop and turn (a restart resumes them), and
    its settlement id if one was staged; a later turn of the run gets a fresh turn id. A
    request whose completed content never finished its response (``response_open``) has its
    id retired here — before its calls are recovered or another request is made — so two
    requests never share an inference id. (A request under an owed id that committed no
    content may be made again under it.)

    The write is the turn's opening commit: ``before_agent_loop_transact`` (a loop's first
    turn) and ``before_turn_transact`` run inside it, so when either is overridden it is
    made even with nothing to change — and with nothing owed, it writes the owed fact, the
    run's ids with it (docs/hooks.md).
    """
    first = ctx.lifecycle.loop_id is None
    if first:
        ctx.lifecycle.loop_id = (owed.loop_id if owed is not None else None) or ctx.new_id()
        if owed is not None and owed.loop_id == ctx.lifecycle.loop_id:
            # A settlement staged before a restart (or a failed settling hook) is the same
            # settlement: its hooks are told the same id.
            ctx.lifecycle.settlement_id = owed.settlement_id
    if ctx.lifecycle.turn_id is None:
        resumed = owed.turn_id if first and owed is not None else None
        ctx.lifecycle.turn_id = resumed or ctx.new_id()
    hooks = _opening_hooks(ctx)
    if owed is None:
        if not hooks:
            return False  # nothing is outstanding: there is nothing to write the ids with
        ctx.commit(StageOwed(owed=ctx.owed_now("inference"), hooks=hooks))
        return True
    staged = msgspec.structs.replace(
        owed,
        loop_id=ctx.lifecycle.loop_id,
        turn_id=ctx.lifecycle.turn_id,
        settlement_id=ctx.lifecycle.settlement_id,
    )
    if owed.response_open:
        # Retired: the id leaves the owed fact, and the next request gets a fresh one from
        # the transaction that continues the response. ``response_open`` stays until that
        # transaction appends after the cut content, so a crash before it still continues.
        staged = msgspec.structs.replace(staged, inference_id=None, stage_opened_at=None)
    elif owed.stage_opened_at is not None and owed.turn_id != staged.turn_id:
        # The stage was opened by an earlier turn of the run (its hooks were told that
        # turn's ids) and no request was made under it: a request of this turn opens a stage
        # of its own under a fresh id — every hook of a request is told the same ids.
        staged = msgspec.structs.replace(staged, inference_id=None, stage_opened_at=None)
    if staged == owed and not hooks:
        return False
    ctx.commit(StageOwed(owed=staged, hooks=hooks))
    return True


def _opening_hooks(ctx: LoopContext) -> tuple[LifecycleHook, ...]:
    """The transactional hooks of the turn's opening commit: ``before_agent_loop_transact``
    when the turn opens a loop, then ``before_turn_transact``."""
    ids = ctx.ids()
    hooks: list[LifecycleHook] = []
    if ctx.run.loop_opening and ctx.hooked("before_agent_loop_transact"):
        hooks.append(LifecycleHook(hook="before_agent_loop_transact", ids=ids))
    if ctx.hooked("before_turn_transact"):
        tokens = ctx.mirror.context_tokens
        hooks.append(LifecycleHook(hook="before_turn_transact", ids=ids, context_tokens=tokens))
    return tuple(hooks)
