"""The loop's stage is explicit: each event moves ``AgentLoop.phase`` along the loop's
path (docs/architecture.md, "Inside the loop").

- a run walks Idle → Loading → before_turn → the pass → inference → the pass → after_turn →
  after_agent_loop → Settling → Idle -> a_run_walks_its_stages_in_spec_order
- a compaction is a stage of its own, until its replacement lands
  -> a_compaction_is_a_stage_until_its_replacement_lands
- an abort leaves the inference at once and ends the turn
  -> an_abort_leaves_the_inference_at_once_and_ends_the_turn
"""

from __future__ import annotations

import itertools

import agentkeep as ak
from agentkeep.loop.effects import Commit, LoopStopped, RunHook, StartCompaction, StartInference
from agentkeep.loop.events import (
    AbortRequested,
    CommitLanded,
    CompactionFinished,
    CompactRequested,
    HookFinished,
    Loaded,
    StreamEventArrived,
    WorkAccepted,
)
from agentkeep.loop.machine import AgentLoop
from agentkeep.loop.phases import (
    Compacting,
    Idle,
    Inferring,
    InHook,
    Loading,
    Passing,
    Phase,
    Settling,
)
from agentkeep.loop.plans import (
    Appended,
    Consumed,
    ConsumeQueue,
    FinishResponse,
    Plan,
    ReplaceWithCompaction,
    Settle,
    Settled,
    Snapshot,
    StageOwed,
)
from agentkeep.types import CompactionCompleted, Done, Settings, TextBlock, TextEnd
from agentkeep.types.records import BlockRecord, QueuedMessage, UserRecord

DEFAULTS = Settings(provider="local", model="gym-1")
MESSAGE = QueuedMessage(id="m1", queue="send", message=ak.user("hi"), seq=1)
RECORD = BlockRecord(block=TextBlock(text="an earlier answer"))


def new_loop() -> AgentLoop:
    counter = itertools.count()
    return AgentLoop("agent", new_id=lambda: f"id{next(counter)}", defaults=DEFAULTS)


def only_commit(effects: list[object]) -> Plan:
    (commit,) = [e for e in effects if isinstance(e, Commit)]
    assert isinstance(commit, Commit)
    return commit.plan


def shown(phase: Phase) -> object:
    """The phase, comparable: a stream's assembler compares by identity, so only its id."""
    return ("Inferring", phase.inference_id) if isinstance(phase, Inferring) else phase


def test_a_run_walks_its_stages_in_spec_order() -> None:
    loop = new_loop()
    seen: list[object] = [loop.phase]
    loop.handle(WorkAccepted(message=MESSAGE))
    seen.append(shown(loop.phase))
    loop.handle(Loaded(snapshot=Snapshot(queued=(MESSAGE,))))
    seen.append(shown(loop.phase))
    consume = only_commit(loop.handle(HookFinished(hook="before_turn")))
    seen.append(shown(loop.phase))
    assert isinstance(consume, ConsumeQueue)
    record = UserRecord(message_id=MESSAGE.id, message=MESSAGE.message)
    value = Consumed(records=(record,), settings=DEFAULTS, remaining=())
    effects = loop.handle(CommitLanded(plan=consume, value=value))
    (start,) = [e for e in effects if isinstance(e, StartInference)]
    seen.append(shown(loop.phase))
    loop.handle(StreamEventArrived(inference_id=start.inference_id, event=TextEnd(text="yes")))
    finish = only_commit(
        loop.handle(StreamEventArrived(inference_id=start.inference_id, event=Done(state="normal")))
    )
    seen.append(shown(loop.phase))
    assert isinstance(finish, FinishResponse)
    block = BlockRecord(block=TextBlock(text="yes"))
    loop.handle(CommitLanded(plan=finish, value=Appended(records=(block,))))
    seen.append(shown(loop.phase))
    loop.handle(HookFinished(hook="after_turn"))
    seen.append(shown(loop.phase))
    settle = only_commit(loop.handle(HookFinished(hook="after_agent_loop")))
    seen.append(shown(loop.phase))
    assert isinstance(settle, Settle)
    stopped = loop.handle(CommitLanded(plan=settle, value=Settled(settled=True)))
    seen.append(shown(loop.phase))

    assert seen == [
        Idle(),
        Loading(),
        InHook("before_turn"),
        Passing(),  # the consumption commits
        ("Inferring", start.inference_id),
        Passing(),  # the response's end commits
        InHook("after_turn"),
        InHook("after_agent_loop"),
        Settling(),
        Idle(),
    ]
    assert LoopStopped(settled=True) in stopped


def test_a_compaction_is_a_stage_until_its_replacement_lands() -> None:
    loop = new_loop()
    loop.handle(CompactRequested())
    loop.handle(Loaded(snapshot=Snapshot(records=(RECORD,), record_count=1)))
    effects = loop.handle(HookFinished(hook="before_turn"))
    (start,) = [e for e in effects if isinstance(e, StartCompaction)]
    assert loop.phase == Compacting(compaction_id=start.compaction_id, through=1)
    stage = only_commit(effects)
    assert isinstance(stage, StageOwed)
    loop.handle(CommitLanded(plan=stage))
    assert loop.phase == Compacting(compaction_id=start.compaction_id, through=1)

    summary = (ak.user("summary"),)
    effects = loop.handle(
        CompactionFinished(
            compaction_id=start.compaction_id, outcome=CompactionCompleted(messages=summary)
        )
    )
    assert loop.phase == Compacting(start.compaction_id, through=1, summarised=True)
    replace = only_commit(effects)
    assert isinstance(replace, ReplaceWithCompaction)
    effects = loop.handle(CommitLanded(plan=replace))

    # The replacement landed: the pass finds nothing owed and the turn ends.
    assert loop.phase == InHook("after_turn")
    assert [e.hook for e in effects if isinstance(e, RunHook)] == ["after_turn"]


def test_an_abort_leaves_the_inference_at_once_and_ends_the_turn() -> None:
    loop = new_loop()
    loop.handle(WorkAccepted(message=MESSAGE))
    loop.handle(Loaded(snapshot=Snapshot(queued=(MESSAGE,))))
    consume = only_commit(loop.handle(HookFinished(hook="before_turn")))
    record = UserRecord(message_id=MESSAGE.id, message=MESSAGE.message)
    value = Consumed(records=(record,), settings=DEFAULTS, remaining=())
    loop.handle(CommitLanded(plan=consume, value=value))
    assert isinstance(loop.phase, Inferring)

    effects = loop.handle(AbortRequested())

    assert loop.phase == InHook("after_turn")
    (hook,) = [e for e in effects if isinstance(e, RunHook)]
    assert hook.aborted
    assert hook.drop_actions
