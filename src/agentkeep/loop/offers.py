"""Consume at acceptance: an idle loop offers its next consumption to the acceptance that
wakes it, so a step commits twice (acceptance with consumption, then the reply), not three
times (``docs/architecture.md``, "Commit boundaries of a step").

The run a message starts is, step by step: ``before_agent_loop``, a reload, ``before_turn``,
the consumption commit, the inference. When the loop is idle and its mirror is the store —
nothing queued or owed, no notice, no call open, the trailing question already looked at —
the reload would read back the mirror, the pass would consume exactly the accepted message,
and (the shell offers only when no feature overrides ``before_agent_loop`` or
``before_turn``) neither hook can see the difference. So the loop names that consumption in
advance (:func:`offer`), with the ids the run will use; the acceptance's transaction checks
the store is still the mirror, and runs the plan there. The loop is then told what landed
(:func:`consumed_at_acceptance`) and goes straight to the inference.

What is durable before what does not change: the acceptance and its consumption commit
together, the consumption exactly as its own commit would have. An acceptance that cannot
consume (the check fails, a hook raises) commits the acceptance alone, as before, and the
loop runs as before.
"""

from __future__ import annotations

from agentkeep.loop import landing
from agentkeep.loop.context import LoopContext, Run
from agentkeep.loop.effects import Observe
from agentkeep.loop.outcomes import Outcome
from agentkeep.loop.phases import Idle, Passing, Turn
from agentkeep.loop.plans import Consumed, ConsumeOffer, ConsumeQueue
from agentkeep.types.records import OwedWork, QueueName


def offer(ctx: LoopContext) -> ConsumeOffer | None:
    """The consumption this idle loop offers the next acceptance, or None if its next run
    could differ from "consume the accepted message, then infer"."""
    if not (ctx.config.consume_at_acceptance and _quiet(ctx)):
        return None
    if ctx.lifecycle.offer_ids is None:
        # Reserved until a run uses them: an offer nobody took leaves no trace of them.
        ctx.lifecycle.offer_ids = (ctx.new_id(), ctx.new_id(), ctx.new_id(), ctx.new_id())
    loop_id, turn_id, call_id, inference_id = ctx.lifecycle.offer_ids
    # The run's lifecycle ids (docs/lifecycle.md) are written with the owed fact by the
    # consumption, as the run's own load and consumption would have: the loop and turn ids
    # before the first hook is told them, the next request's id with the inference it owes.
    owed = OwedWork(stage="inference", loop_id=loop_id, turn_id=turn_id, inference_id=inference_id)
    config = ctx.config

    def plan(queue: QueueName) -> ConsumeQueue:
        return ConsumeQueue(
            queue=queue,
            mode=config.modes[queue],
            defaults=config.defaults,
            owed=owed,
            call_id=call_id,
        )

    return ConsumeOffer(
        steering=plan("steering"),
        send=plan("send"),
        record_count=len(ctx.mirror.records),
        settings=ctx.mirror.settings,
        context_tokens=ctx.mirror.context_tokens,
    )


def _quiet(ctx: LoopContext) -> bool:
    """Idle with a mirror a reload would confirm and nothing that a run would do first.
    (A child still unwinding — the last response's stream — holds up only the inference,
    as it would after a consumption of the run's own: ``transitions.decide``.)"""
    return (
        isinstance(ctx.phase, Idle)
        and ctx.mirror.valid
        and ctx.mirror.resume_checked
        and ctx.mirror.owed is None
        and not ctx.mirror.has_input()
        and not ctx.requests.turn
        and not ctx.requests.compaction
        and not ctx.requests.shutdown
        and not ctx.requests.retry_stopped
        and ctx.commits.idle()
        and not ctx.mirror.open_calls.calls(ctx.mirror.records)
    )


def consumed_at_acceptance(ctx: LoopContext, plan: ConsumeQueue, value: Consumed) -> Outcome:
    """The acceptance consumed under this loop's offer: start the run as ``request_turn``
    and the turn's load would have, with the consumption landed (``DONE``: the pass goes
    on) — or, for an offer this loop does not hold, ``RUN_WANTED``."""
    ids = ctx.lifecycle.offer_ids
    owed = plan.owed
    if not _quiet(ctx) or ids is None or (owed.loop_id, owed.turn_id) != ids[:2]:
        # Not the offer this loop holds (the shell's claim protocol rules it out): go on
        # from the durable state, which holds the consumption.
        acceptance_outcome_unknown(ctx)
        return Outcome.RUN_WANTED
    ctx.lifecycle.offer_ids = None
    # request_turn + the load's lifecycle_ids: the run opens with the ids the consumption
    # wrote, bracketed by before_agent_loop (told them).
    ctx.lifecycle.loop_id = owed.loop_id
    ctx.lifecycle.turn_id = owed.turn_id
    ctx.lifecycle.inference_id = None
    ctx.lifecycle.settlement_id = None
    ctx.run = Run()  # before_agent_loop is told below, not at a load
    ctx.out.append(Observe(hook="before_agent_loop", ids=ctx.ids()))
    # begin_turn + loaded: the reload would have read the mirror back (the acceptance's
    # transaction checked it), found nothing to resume and no question owed; no feature
    # overrides before_turn. The pass is past steering and send: what it consumed landed.
    ctx.turn = Turn(loaded=True, step="notices")
    ctx.requests.turn = False
    ctx.phase = Passing()
    landing.consumed(ctx, plan, value)
    return Outcome.DONE


def acceptance_outcome_unknown(ctx: LoopContext) -> None:
    """An acceptance that took the offer may have committed it: trust nothing remembered
    (as ``interruptions.continue_from_store``); the ``Start`` that follows reloads it all
    and answers a trailing question."""
    ctx.lifecycle.offer_ids = None
    ctx.mirror.valid = False
    ctx.mirror.resume_checked = False
