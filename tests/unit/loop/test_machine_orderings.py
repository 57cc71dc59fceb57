"""Orderings of a tool batch on the pure core, each order an event sequence: no threads, no
store, no grace to wait out. Which effect comes before which when an abort, steering or a
drain meets running calls, when a cancelled child stops, and when results finish out of
call order. The threaded tests that cover the same orderings through the actor shell (and
spend a child's grace doing it) run in ``make test``, not ``make test-fast``
(``tests/unit/conftest.py``: ``SLOW``)."""

from __future__ import annotations

import itertools

import pytest

from agentkeep.loop.effects import (
    CancelTools,
    Commit,
    Effect,
    LoadState,
    LoopStopped,
    RunHook,
    StartInference,
    StartTools,
)
from agentkeep.loop.events import (
    AbortRequested,
    ChildStopped,
    CommitLanded,
    HookFinished,
    Loaded,
    ShutdownRequested,
    Start,
    StreamEventArrived,
    ToolFinished,
    ToolLifetimes,
    WorkAccepted,
)
from agentkeep.loop.machine import AgentLoop
from agentkeep.loop.plans import (
    Appended,
    ClaimToolResults,
    CommitToolResult,
    Consumed,
    ConsumeQueue,
    DispatchBatch,
    Plan,
    Settled,
    Snapshot,
)
from agentkeep.loop.texts import ABORTED_CALL, DRAINED_CALL, STEERED_CALL
from agentkeep.types import Done, TextBlock, ToolCallEnd, ToolCallStart, ToolResultMessage
from agentkeep.types.records import PendingToolCall, QueuedMessage, ToolRecord, UserRecord

from .test_machine_unit import DEFAULTS, begin_inference, message, new_loop

STEER = QueuedMessage(id="s1", queue="steering", message=message(9, "change course").message, seq=9)


def commits(effects: list[Effect]) -> list[Plan]:
    return [e.plan for e in effects if isinstance(e, Commit)]


def cancelled(effects: list[Effect]) -> list[str]:
    return [i for e in effects if isinstance(e, CancelTools) for i in e.internal_ids]


def land(loop: AgentLoop, plan: Plan) -> list[Effect]:
    """The commit of ``plan`` landed, with the value its kind of plan returns."""
    value: Appended | Settled | Consumed | None = None
    if isinstance(plan, CommitToolResult):
        value = Appended(records=(ToolRecord(message=plan.result),))
    elif isinstance(plan, ConsumeQueue):
        records = (UserRecord(message_id="m2", message=message(2).message),)
        value = Consumed(records=records, settings=DEFAULTS, remaining=())
    elif plan.result_type is Appended:
        value = Appended(records=())
    elif plan.result_type is Settled:
        value = Settled(settled=True)
    return list(loop.handle(CommitLanded(plan=plan, value=value)))


def running_batch(loop: AgentLoop, call_ids: tuple[str, ...]) -> tuple[PendingToolCall, ...]:
    """A response asking for ``call_ids``, its batch durable and its calls started (the
    response's stream child has stopped)."""
    iid = begin_inference(loop)
    for call_id in call_ids:
        for event in (
            ToolCallStart(call_id=call_id, name="t"),
            ToolCallEnd(call_id=call_id, arguments="{}"),
        ):
            for plan in commits(
                list(loop.handle(StreamEventArrived(inference_id=iid, event=event)))
            ):
                assert not commits(land(loop, plan))
    effects = list(loop.handle(StreamEventArrived(inference_id=iid, event=Done(state="tool_call"))))
    while not any(isinstance(e, StartTools) for e in effects):
        (plan,) = commits(effects)
        effects = land(loop, plan)
        batch = plan.calls if isinstance(plan, DispatchBatch) else ()
    (start,) = [e for e in effects if isinstance(e, StartTools)]
    assert [r.call.call_id for r in start.runs] == list(call_ids)
    assert loop.handle(ChildStopped(child_id=iid)) == []
    return batch


def result(call_id: str) -> ToolResultMessage:
    return ToolResultMessage(call_id=call_id, content=(TextBlock(text=call_id.upper()),))


def answered(plan: Plan) -> tuple[str, str, bool]:
    assert isinstance(plan, CommitToolResult)
    text = "".join(b.text for b in plan.result.content if isinstance(b, TextBlock))
    return plan.result.call_id, text, plan.result.is_error


def until_idle(loop: AgentLoop, effects: list[Effect]) -> list[Effect]:
    """Land every commit and finish every hook until nothing more is asked for; returns the
    last effects (the run's ``LoopStopped``, or what waits on something else)."""
    for _ in range(50):
        plans = commits(effects)
        hooks = [e for e in effects if isinstance(e, RunHook)]
        if plans:
            (plan,) = plans
            effects = land(loop, plan)
        elif hooks:
            effects = list(loop.handle(HookFinished(hook=hooks[0].hook)))
        elif any(isinstance(e, LoadState) for e in effects):
            effects = list(loop.handle(Loaded(snapshot=Snapshot(queued=(message(2),)))))
        else:
            return effects
    raise AssertionError("the loop never came to rest")


@pytest.mark.parametrize("order", list(itertools.permutations("abc")))
def test_results_commit_in_call_order_whatever_order_the_calls_finish_in(
    order: tuple[str, ...],
) -> None:
    """Invariant I14; threaded: ``test_tool_batches::test_results_land_in_call_order_...``."""
    loop = new_loop()
    batch = running_batch(loop, ("a", "b", "c"))
    by_call = {p.call.call_id: p for p in batch}
    landed: list[str] = []
    queue: list[Plan] = []
    for call_id in order:
        effects = list(
            loop.handle(
                ToolFinished(internal_id=by_call[call_id].internal_id, result=result(call_id))
            )
        )
        queue += commits(effects)
        while queue:  # one commit in flight at a time; each lands before the next is asked
            plan = queue.pop(0)
            assert isinstance(plan, CommitToolResult)
            landed.append(plan.pending.call.call_id)
            assert (plan.owed_after is not None) == (plan.pending is batch[-1])
            more = land(loop, plan)
            queue += [p for p in commits(more) if isinstance(p, CommitToolResult)]
    assert landed == ["a", "b", "c"]


@pytest.mark.parametrize("end", ["stopped-first", "stopped-after", "late-result-after"])
def test_abort_during_a_call_answers_it_at_once_and_the_next_inference_waits_for_its_child(
    end: str,
) -> None:
    """An abort answers the running call as aborted without waiting for it; the message
    queued behind runs in a new run; its inference starts only once the aborted call's work
    is over (its child stopped, or its late result came: ignored as a result), whichever
    comes first. Threaded: ``test_abort_and_failures::test_abort_during_a_tool_...`` and
    ``test_lifecycle_concurrency::test_the_next_inference_waits_for_an_aborted_tool_...``."""
    loop = new_loop()
    (call,) = running_batch(loop, ("a",))
    assert loop.handle(WorkAccepted(message=message(2, "queued"))) == []

    effects = list(loop.handle(AbortRequested()))

    assert cancelled(effects) == [call.internal_id]
    (plan,) = commits(effects)
    assert answered(plan) == ("a", ABORTED_CALL, True)
    stopped = until_idle(loop, land(loop, plan))
    assert stopped == [LoopStopped(settled=False)]  # input is left: the shell starts again

    if end == "stopped-first":
        assert loop.handle(ChildStopped(child_id=call.internal_id)) == []
    effects = until_idle(loop, list(loop.handle(Start())))
    started = [e for e in effects if isinstance(e, StartInference)]
    if end == "stopped-first":
        assert len(started) == 1
        return
    assert started == []  # consumed, but the aborted call's child still runs
    if end == "stopped-after":
        effects = list(loop.handle(ChildStopped(child_id=call.internal_id)))
    else:
        effects = list(loop.handle(ToolFinished(internal_id=call.internal_id, result=result("a"))))
        assert commits(effects) == []  # the late result is not the call's answer
    assert len([e for e in effects if isinstance(e, StartInference)]) == 1


@pytest.mark.parametrize("lifetimes_first", [True, False], ids=["flags-first", "steer-first"])
def test_steering_answers_a_steerable_call_at_once_whichever_comes_first(
    lifetimes_first: bool,
) -> None:
    """New steering interrupts a running steerable call: answered as steered and cancelled at
    once, never waited for; the ordinary call beside it is waited for, and results still
    commit in call order. Both orders of the steering and the runtime's lifetime flags.
    Threaded: ``test_tool_lifetime_races::test_steering_before_a_steerable_tool_started_...``
    and ``test_steering_accepted_while_the_model_asks_for_a_steerable_call_...``."""
    loop = new_loop()
    plain, watch = running_batch(loop, ("plain", "watch"))
    flags = ToolLifetimes(steerable=(watch.internal_id,))
    if lifetimes_first:
        assert loop.handle(flags) == []
        effects = list(loop.handle(WorkAccepted(message=STEER)))
    else:
        assert loop.handle(WorkAccepted(message=STEER)) == []  # not known steerable yet
        effects = list(loop.handle(flags))
    assert cancelled(effects) == [watch.internal_id]
    assert commits(effects) == []  # the steered answer waits for the call before it

    effects = list(loop.handle(ToolFinished(internal_id=plain.internal_id, result=result("plain"))))
    (first,) = commits(effects)
    assert answered(first) == ("plain", "PLAIN", False)
    (second,) = commits(land(loop, first))
    assert answered(second) == ("watch", STEERED_CALL, True)
    assert isinstance(second, CommitToolResult)
    assert second.owed_after is not None  # the batch's last result: the inference is owed


@pytest.mark.parametrize("lifetimes_first", [True, False], ids=["flags-first", "drain-first"])
def test_a_drain_answers_steerable_calls_parks_reloadable_ones_and_waits_for_the_rest(
    lifetimes_first: bool,
) -> None:
    """A drain: a steerable call is answered as drained at once, a reloadable one is cancelled
    without a result (pending for the next process), an ordinary one is waited for and
    commits; the results behind the parked call are claimed, never committed as answers.
    Both orders of the drain and the runtime's lifetime flags. Threaded:
    ``test_tool_lifetime_races::test_a_drain_before_a_{steerable,reloadable}_tool_started_...``."""
    loop = new_loop()
    plain, watch, reload = running_batch(loop, ("plain", "watch", "reload"))
    flags = ToolLifetimes(steerable=(watch.internal_id,), reloadable=(reload.internal_id,))
    if lifetimes_first:
        assert loop.handle(flags) == []
        effects = list(loop.handle(ShutdownRequested()))
    else:
        loop.handle(ShutdownRequested())
        effects = list(loop.handle(flags))
    assert sorted(cancelled(effects)) == sorted([watch.internal_id, reload.internal_id])
    assert commits(effects) == []  # the ordinary call comes first and is waited for

    effects = list(loop.handle(ToolFinished(internal_id=plain.internal_id, result=result("plain"))))
    (first,) = commits(effects)
    assert answered(first) == ("plain", "PLAIN", False)
    (second,) = commits(land(loop, first))
    assert answered(second) == ("watch", DRAINED_CALL, True)
    effects = land(loop, second)
    # The reloadable call is left pending: nothing answers it, nothing is claimed behind it.
    assert commits(effects) == []
    assert not any(isinstance(p, ClaimToolResults) for p in commits(effects))
    late = list(loop.handle(ToolFinished(internal_id=reload.internal_id, result=result("reload"))))
    assert commits(late) == []
