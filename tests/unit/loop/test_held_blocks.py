"""A finished block is durable within a bound, event by event.

The loop holds a finished block until the provider's next event, so that the last block rides
in the response's finishing commit. The hold is bounded: a timer (``held_block_seconds``)
commits the held blocks on their own if no event comes first — marking the response open, as
any committed block does. A next event (or the response's end) before the timer cancels it
and costs no extra commit; a timer whose blocks went another way does nothing.
"""

from __future__ import annotations

import pytest

import agentkeep as ak
from agentkeep.loop.effects import CancelTimer, Commit, StartTimer
from agentkeep.loop.events import (
    AbortRequested,
    CommitLanded,
    StreamEventArrived,
    TimerFired,
)
from agentkeep.loop.machine import AgentLoop
from agentkeep.loop.plans import AppendBlock, Appended, FinishResponse
from agentkeep.types import (
    Done,
    ReasoningBlock,
    ReasoningEnd,
    ReasoningStart,
    TextBlock,
    TextDelta,
    TextEnd,
    TextStart,
    Tokens,
)
from agentkeep.types.records import BlockRecord

from .conftest import World
from .test_machine_unit import begin_inference, kinds, new_loop

THOUGHT = ReasoningEnd(text="thinking it over", reasoning="sig")
BLOCK = ReasoningBlock(text="thinking it over", reasoning="sig")
DONE = Done(state="normal", tokens=Tokens(input=10, output=2))


def stream(loop: AgentLoop, iid: str, event: object) -> list[object]:
    return list(loop.handle(StreamEventArrived(inference_id=iid, event=event)))  # type: ignore[arg-type]


def commits(effects: list[object]) -> list[object]:
    return [e.plan for e in effects if isinstance(e, Commit)]


def held_timer(loop: AgentLoop, iid: str) -> StartTimer:
    """Stream a reasoning block to its end: the one effect besides its emission arms the
    hold's timer."""
    stream(loop, iid, ReasoningStart())
    effects = stream(loop, iid, THOUGHT)
    assert kinds(effects) == ["Emit", "StartTimer"]
    timer = effects[1]
    assert isinstance(timer, StartTimer)
    return timer


def test_the_timer_commits_a_block_the_stream_stalled_after() -> None:
    loop = new_loop(held_block_seconds=0.03)
    iid = begin_inference(loop)
    timer = held_timer(loop, iid)
    assert timer.seconds == 0.03

    # No event came: the bound passed and the held block is committed on its own, with the
    # owed fact marking the response open (a restart retires the id and continues it).
    (plan,) = commits(loop.handle(TimerFired(timer_id=timer.timer_id)))
    assert isinstance(plan, AppendBlock)
    assert plan.block == BLOCK
    assert plan.owed is not None
    assert plan.owed.response_open
    assert plan.owed.inference_id == iid
    assert kinds(loop.handle(CommitLanded(plan=plan, value=Appended(records=())))) == []
    assert loop.owed == plan.owed

    # The stream goes on: nothing is held, so the next event commits nothing and arms
    # nothing; the response's end carries only its own block.
    assert kinds(stream(loop, iid, TextStart())) == ["Emit"]
    stream(loop, iid, TextDelta(delta="answer"))
    stream(loop, iid, TextEnd(text="answer"))
    effects = stream(loop, iid, DONE)
    (finish,) = commits(effects)
    assert isinstance(finish, FinishResponse)
    assert finish.blocks == (TextBlock(text="answer"),)
    # A second firing of the spent timer (a late tick) does nothing.
    assert loop.handle(TimerFired(timer_id=timer.timer_id)) == []


def test_a_next_event_before_the_timer_costs_no_extra_commit() -> None:
    loop = new_loop()
    iid = begin_inference(loop)
    timer = held_timer(loop, iid)

    # The next event flushes the held block, as before the bound existed, and cancels the
    # timer: one commit for the block, none more.
    effects = stream(loop, iid, TextStart())
    assert CancelTimer(timer_id=timer.timer_id) in effects
    (plan,) = commits(effects)
    assert isinstance(plan, AppendBlock)
    assert plan.block == BLOCK
    appended = Appended(records=(BlockRecord(block=BLOCK),))
    landed = loop.handle(CommitLanded(plan=plan, value=appended))
    assert commits(landed) == []
    # The cancelled timer's tick, if it still arrives, does nothing.
    assert loop.handle(TimerFired(timer_id=timer.timer_id)) == []

    # The last block rides in the finishing commit: its timer is cancelled by the end.
    stream(loop, iid, TextEnd(text="answer"))
    effects = stream(loop, iid, DONE)
    assert kinds(effects)[:2] == ["Emit", "CancelTimer"]
    (finish,) = commits(effects)
    assert isinstance(finish, FinishResponse)
    assert finish.blocks == (TextBlock(text="answer"),)


def test_a_response_that_ends_right_after_its_block_is_one_commit() -> None:
    """The common case keeps its saving: a one-block reply is the finishing commit alone."""
    loop = new_loop(eager_settle=True)
    iid = begin_inference(loop)
    effects = stream(loop, iid, TextEnd(text="hello"))
    (timer,) = [e for e in effects if isinstance(e, StartTimer)]
    assert commits(effects) == []
    effects = stream(loop, iid, DONE)
    assert CancelTimer(timer_id=timer.timer_id) in effects
    (finish,) = commits(effects)
    assert isinstance(finish, FinishResponse)
    assert finish.blocks == (TextBlock(text="hello"),)
    assert finish.settle
    assert loop.handle(TimerFired(timer_id=timer.timer_id)) == []  # stale: nothing


@pytest.mark.parametrize("stall", [True, False], ids=["timer first", "event first"])
def test_held_blocks_commit_in_order_behind_a_commit_in_flight(stall: bool) -> None:
    """Commits stay strictly sequential: a block the timer commits while the previous one
    is in flight waits behind it, and the response's end waits for both."""
    loop = new_loop()
    iid = begin_inference(loop)
    held_timer(loop, iid)
    (first,) = commits(stream(loop, iid, TextStart()))  # the reasoning block: in flight
    effects = stream(loop, iid, TextEnd(text="half"))
    (timer,) = [e for e in effects if isinstance(e, StartTimer)]
    if stall:
        assert commits(loop.handle(TimerFired(timer_id=timer.timer_id))) == []  # queued
    else:
        assert commits(stream(loop, iid, TextStart())) == []  # queued
    assert commits(stream(loop, iid, Done(state="normal"))) == []  # waits for them
    (second,) = commits(loop.handle(CommitLanded(plan=first, value=Appended(records=()))))
    assert isinstance(second, AppendBlock)
    assert second.block == TextBlock(text="half")
    (finish,) = commits(loop.handle(CommitLanded(plan=second, value=Appended(records=()))))
    assert isinstance(finish, FinishResponse)
    assert finish.blocks == ()


def test_an_abort_flushes_the_held_block_and_cancels_its_timer() -> None:
    loop = new_loop()
    iid = begin_inference(loop)
    timer = held_timer(loop, iid)
    effects = list(loop.handle(AbortRequested()))
    assert CancelTimer(timer_id=timer.timer_id) in effects
    plan = commits(effects)[0]
    assert isinstance(plan, AppendBlock)
    assert plan.block == BLOCK
    assert loop.handle(TimerFired(timer_id=timer.timer_id)) == []


def test_a_bound_of_zero_commits_each_block_as_it_finishes() -> None:
    loop = new_loop(held_block_seconds=0)
    iid = begin_inference(loop)
    stream(loop, iid, ReasoningStart())
    effects = stream(loop, iid, THOUGHT)
    assert not [e for e in effects if isinstance(e, StartTimer)]
    (plan,) = commits(effects)
    assert isinstance(plan, AppendBlock)
    assert plan.block == BLOCK


@pytest.mark.parametrize("bound", [-0.01, float("inf"), float("nan"), "0.05", True])
def test_a_bad_bound_is_refused_at_open_naming_it(world: World, bound: object) -> None:
    with pytest.raises(ak.InvalidConfigError, match="held_block_seconds"):
        world.open(held_block_seconds=bound)
