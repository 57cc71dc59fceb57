"""The pure core, event by event: no threads, no store — only effects in, events out."""

from __future__ import annotations

import itertools

import pytest

import agentkeep as ak
from agentkeep.loop.context import RetryPolicy
from agentkeep.loop.effects import (
    CancelInference,
    CancelTools,
    Commit,
    Emit,
    LoadState,
    LoopStopped,
    Observe,
    RunHook,
    StartInference,
    StartTools,
)
from agentkeep.loop.events import (
    AbortRequested,
    CommitFailed,
    CommitLanded,
    CompactRequested,
    HookFinished,
    Loaded,
    Start,
    StreamEventArrived,
    ToolFinished,
    WorkAccepted,
)
from agentkeep.loop.machine import AgentLoop
from agentkeep.loop.plans import (
    AnswerCalls,
    Appended,
    Consumed,
    ConsumeNotices,
    ConsumeQueue,
    DispatchBatch,
    FinishResponse,
    Settle,
    Snapshot,
    StageOwed,
)
from agentkeep.types import (
    Done,
    Settings,
    TextBlock,
    TextEnd,
    Tokens,
    ToolCallBlock,
    ToolCallEnd,
    ToolCallStart,
    ToolResultMessage,
)
from agentkeep.types.records import (
    BlockRecord,
    OwedWork,
    PendingToolCall,
    QueuedMessage,
    SystemRecord,
    ToolRecord,
    UserRecord,
)

DEFAULTS = Settings(provider="local", model="gym-1")


def new_loop(**options: object) -> AgentLoop:
    counter = itertools.count()
    return AgentLoop("agent", new_id=lambda: f"id{next(counter)}", defaults=DEFAULTS, **options)  # type: ignore[arg-type]


def message(seq: int, text: str = "hi") -> QueuedMessage:
    return QueuedMessage(id=f"m{seq}", queue="send", message=ak.user(text), seq=seq)


def kinds(effects: list[object]) -> list[str]:
    return [type(e).__name__ for e in effects]


def start_turn(loop: AgentLoop, queued: tuple[QueuedMessage, ...]) -> list[object]:
    """Accept, load, run before_turn: returns the effects up to the first consumption."""
    # before_agent_loop waits for the load: it is told the loop id the owed fact holds.
    assert kinds(loop.handle(WorkAccepted(message=queued[0]))) == ["LoadState"]
    effects = loop.handle(Loaded(snapshot=Snapshot(queued=queued)))
    assert kinds(effects) == ["Observe", "RunHook"]
    return list(loop.handle(HookFinished(hook="before_turn")))


def land_consumption(loop: AgentLoop, plan: ConsumeQueue, *messages: QueuedMessage) -> list[object]:
    records = tuple(UserRecord(message_id=m.id, message=m.message) for m in messages)
    value = Consumed(records=records, settings=DEFAULTS, remaining=())
    return list(loop.handle(CommitLanded(plan=plan, value=value)))


def begin_inference(loop: AgentLoop) -> str:
    """Accept one message, consume it, and return the id of the inference that starts."""
    commit = start_turn(loop, (message(1),))[0]
    assert isinstance(commit, Commit)
    assert isinstance(commit.plan, ConsumeQueue)
    effects = land_consumption(loop, commit.plan, message(1))
    start = next(e for e in effects if isinstance(e, StartInference))
    return start.inference_id


def test_a_message_is_consumed_in_one_commit_before_the_inference_starts() -> None:
    loop = new_loop()
    effects = start_turn(loop, (message(1),))
    (commit,) = effects
    assert isinstance(commit, Commit)
    assert isinstance(commit.plan, ConsumeQueue)
    assert commit.plan.queue == "send"

    effects = land_consumption(loop, commit.plan, message(1))

    assert kinds(effects) == ["Observe", "Observe", "StartInference"]
    accepted, before_inference, start = effects
    # The message is observed once its consumption is durable, then the inference starts.
    assert isinstance(accepted, Observe)
    assert accepted.hook == "message_accepted"
    assert accepted.accepted is not None
    assert accepted.accepted.message_id == message(1).id
    assert isinstance(before_inference, Observe)
    assert before_inference.hook == "before_inference"
    assert isinstance(start, StartInference)
    assert [type(m).__name__ for m in start.messages] == ["UserMessage"]


def test_a_response_ends_in_one_transaction_with_its_last_block_and_settles() -> None:
    loop = new_loop(eager_settle=True)
    iid = begin_inference(loop)

    # The finished block waits one event (at most ``held_block_seconds``: the timer), so
    # nothing commits it before the response ends.
    assert kinds(
        loop.handle(StreamEventArrived(inference_id=iid, event=TextEnd(text="hello")))
    ) == ["Emit", "StartTimer"]
    done = Done(state="normal", tokens=Tokens(input=10, output=2))
    effects = loop.handle(StreamEventArrived(inference_id=iid, event=done))
    assert kinds(effects)[:2] == ["Emit", "CancelTimer"]  # it rides in the finishing commit

    finish = [e for e in effects if isinstance(e, Commit)]
    assert len(finish) == 1
    plan = finish[0].plan
    assert isinstance(plan, FinishResponse)
    assert plan.blocks == (TextBlock(text="hello"),)
    assert plan.settle
    landed = loop.handle(
        CommitLanded(
            plan=plan, value=Appended(records=(BlockRecord(block=plan.blocks[0]),), settled=True)
        )
    )
    stopped = [e for e in landed if isinstance(e, RunHook)]
    assert [h.hook for h in stopped] == ["after_turn"]
    assert kinds(loop.handle(HookFinished(hook="after_turn"))) == ["RunHook"]
    final = loop.handle(HookFinished(hook="after_agent_loop"))
    assert [e for e in final if isinstance(e, LoopStopped)] == [LoopStopped(settled=True)]
    assert not loop.running
    assert loop.context_tokens == 12


@pytest.mark.parametrize("retrying", [False, True], ids=["gives up", "retries forever"])
def test_a_response_failing_right_after_a_block_keeps_its_content_open(retrying: bool) -> None:
    """C2: a block finished, then the stream failed, so the block lands with the response's
    end. The response was cut short: its owed fact keeps ``response_open`` (a restart before
    the failure note or the retry's continue notice lands continues it, never settles)."""
    loop = new_loop(retry=RetryPolicy(initial_seconds=1, max_seconds=1) if retrying else None)
    iid = begin_inference(loop)
    loop.handle(StreamEventArrived(inference_id=iid, event=TextEnd(text="half an answer")))
    failed = Done(state="error", message="The provider is overloaded.")
    effects = loop.handle(StreamEventArrived(inference_id=iid, event=failed))

    plans = [e.plan for e in effects if isinstance(e, Commit)]
    assert len(plans) == 1
    finish = plans[0]
    assert isinstance(finish, FinishResponse)
    assert [type(b).__name__ for b in finish.blocks] == ["TextBlock"]
    assert finish.owed is not None
    assert finish.owed.response_open
    assert finish.owed.inference_id is None  # its id is spent either way


def test_the_batch_is_committed_before_any_call_starts_and_results_land_in_order() -> None:
    loop = new_loop()
    iid = begin_inference(loop)
    effects: list[object] = []
    for event in (
        ToolCallStart(call_id="a", name="t"),
        ToolCallEnd(call_id="a", arguments="{}"),
        ToolCallStart(call_id="b", name="t"),  # block "a" is committed now (the response goes on)
        ToolCallEnd(call_id="b", arguments="{}"),
        Done(state="tool_call"),
    ):
        effects = list(loop.handle(StreamEventArrived(inference_id=iid, event=event)))
        for appended in [e for e in effects if isinstance(e, Commit)]:
            if type(appended.plan).__name__ == "AppendBlock":
                landed = CommitLanded(plan=appended.plan, value=Appended(records=()))
                effects = list(loop.handle(landed))

    # The blocks land first; no call starts until the whole batch is durable.
    assert not [e for e in effects if isinstance(e, StartTools)]
    plan = next(e.plan for e in effects if isinstance(e, Commit))
    assert isinstance(plan, FinishResponse)
    effects = loop.handle(CommitLanded(plan=plan, value=Appended(records=())))
    dispatch = [e for e in effects if isinstance(e, Commit)]
    assert isinstance(dispatch[0].plan, DispatchBatch)
    batch = dispatch[0].plan.calls
    effects = loop.handle(CommitLanded(plan=dispatch[0].plan))
    (start_tools,) = [e for e in effects if isinstance(e, StartTools)]
    assert [r.call.call_id for r in start_tools.runs] == ["a", "b"]

    second, first = batch[1], batch[0]
    result_b = ToolResultMessage(call_id="b", content=(TextBlock(text="B"),))
    assert not [
        e
        for e in loop.handle(ToolFinished(internal_id=second.internal_id, result=result_b))
        if isinstance(e, Commit)
    ]  # the second result waits for the first
    result_a = ToolResultMessage(call_id="a", content=(TextBlock(text="A"),))
    effects = loop.handle(ToolFinished(internal_id=first.internal_id, result=result_a))
    (commit_a,) = [e for e in effects if isinstance(e, Commit)]
    assert commit_a.plan.pending is first  # type: ignore[union-attr]
    effects = loop.handle(
        CommitLanded(plan=commit_a.plan, value=Appended(records=(ToolRecord(message=result_a),)))
    )
    (commit_b,) = [e for e in effects if isinstance(e, Commit)]
    assert commit_b.plan.pending is second  # type: ignore[union-attr]
    assert commit_b.plan.owed_after is not None  # type: ignore[union-attr]  # the last one


def test_abort_during_a_stream_cancels_it_answers_its_calls_and_ends_once() -> None:
    loop = new_loop()
    iid = begin_inference(loop)
    loop.handle(StreamEventArrived(inference_id=iid, event=ToolCallStart(call_id="c", name="t")))
    loop.handle(
        StreamEventArrived(inference_id=iid, event=ToolCallEnd(call_id="c", arguments="{}"))
    )

    effects = loop.handle(AbortRequested())

    assert any(isinstance(e, CancelInference) for e in effects)
    assert [e.event for e in effects if isinstance(e, Emit)] == [Done(state="cancelled")]
    commits = [e.plan for e in effects if isinstance(e, Commit)]
    # The finished call block is kept, then answered as aborted (no call left unanswered).
    assert type(commits[0]).__name__ == "AppendBlock"
    loop.handle(CommitLanded(plan=commits[0], value=Appended(records=())))
    # Late events of the cancelled stream change nothing: one terminal event per response.
    late = loop.handle(StreamEventArrived(inference_id=iid, event=Done(state="cancelled")))
    assert not [e for e in late if isinstance(e, Emit)]
    assert not [e for e in late if isinstance(e, CancelTools)]


def test_an_answer_calls_plan_names_every_call_of_a_response_that_did_not_ask_for_tools() -> None:
    loop = new_loop()
    iid = begin_inference(loop)
    loop.handle(StreamEventArrived(inference_id=iid, event=ToolCallStart(call_id="c", name="t")))
    loop.handle(
        StreamEventArrived(inference_id=iid, event=ToolCallEnd(call_id="c", arguments="{}"))
    )
    effects = loop.handle(StreamEventArrived(inference_id=iid, event=Done(state="normal")))
    finish = next(e.plan for e in effects if isinstance(e, Commit))
    effects = loop.handle(CommitLanded(plan=finish, value=Appended(records=())))

    (answer,) = [e.plan for e in effects if isinstance(e, Commit)]
    assert isinstance(answer, AnswerCalls)
    assert [r.call_id for r in answer.results] == ["c"]
    assert all(r.is_error for r in answer.results)


def test_a_loaded_history_with_a_stranded_call_is_dispatched_as_a_fresh_batch() -> None:
    loop = new_loop()
    call = ToolCallBlock(call_id="s", name="t", arguments="{}")
    records = (UserRecord(message_id="m", message=ak.user("q")), BlockRecord(block=call))
    loop.handle(WorkAccepted(message=message(1)))
    loop.handle(Loaded(snapshot=Snapshot(records=records, record_count=2)))
    effects = loop.handle(HookFinished(hook="before_turn"))

    (commit,) = [e for e in effects if isinstance(e, Commit)]
    assert isinstance(commit.plan, DispatchBatch)
    assert [p.call.call_id for p in commit.plan.calls] == ["s"]
    assert kinds([LoadState()]) == ["LoadState"]


def test_the_turn_s_hooks_wait_for_its_ids_to_be_durable_and_a_failed_staging_runs_none() -> None:
    """flaky_store seeds 427, 704 and 985: a load that must stage the run's ids (here: a
    response cut after its first block, whose inference id is retired) committed them and
    started ``before_turn`` in the same step. The commit's outcome was unknown, the loop went
    back to loading while the hook still ran, and that hook's late finish was taken for the
    next stage's — the run settled over an unanswered failure note (invariant I7). The hooks
    now wait
    for the staging commit, so they are never told ids that did not become durable."""
    loop = new_loop()
    owed = OwedWork(
        stage="inference", loop_id="L", turn_id="T", inference_id="I", response_open=True
    )
    records = (
        UserRecord(message_id="m1", message=ak.user("q")),
        BlockRecord(block=TextBlock(text="cut")),
        SystemRecord(message=ak.system("The last turn failed: boom"), reason="failure"),
    )
    assert kinds(loop.handle(Start())) == ["LoadState"]
    effects = loop.handle(Loaded(snapshot=Snapshot(records=records, record_count=3, owed=owed)))
    (stage,) = effects  # no hook yet: nothing is told ids that are not durable
    assert isinstance(stage, Commit)
    assert isinstance(stage.plan, StageOwed)
    assert stage.plan.owed.inference_id is None  # the cut request's id is retired

    # Its outcome is unknown: go on from the store, with no hook running to finish later.
    effects = loop.handle(CommitFailed(plan=stage.plan, message="io", outcome_unknown=True))
    assert kinds(effects) == ["LoadState"]
    effects = loop.handle(Loaded(snapshot=Snapshot(records=records, record_count=3, owed=owed)))
    (stage,) = effects
    assert isinstance(stage, Commit)
    assert isinstance(stage.plan, StageOwed)

    # Landed: now the run's hooks are told the durable ids, and the question is answered.
    effects = loop.handle(CommitLanded(plan=stage.plan, value=None))
    assert kinds(effects) == ["Observe", "RunHook"]
    observe, hook = effects
    assert isinstance(observe, Observe)
    assert observe.hook == "before_agent_loop"
    assert isinstance(hook, RunHook)
    assert hook.hook == "before_turn"
    assert (hook.ids.loop_id, hook.ids.turn_id) == ("L", stage.plan.owed.turn_id)
    effects = loop.handle(HookFinished(hook="before_turn"))
    assert not any(isinstance(e, Commit) and isinstance(e.plan, Settle) for e in effects)
    assert any(
        isinstance(e, Commit) and isinstance(e.plan, StageOwed | ConsumeNotices) for e in effects
    ) or any(isinstance(e, StartInference) for e in effects)


def test_a_turn_whose_staging_keeps_failing_counts_as_failed_and_the_run_stops() -> None:
    """compaction_under_load seeds 10 and 13: a commit's outcome was unknown (the store
    crashed in COMMIT), and from then on the store refused every write — a full disk, a
    server gone. Each new turn's staging commit failed behind an open call whose batch is
    durable, where no failure note may be written; unnoted, the failure was never counted,
    and the compaction still asked for, so the run began the next turn at once: 260,000
    refused BEGINs, and a close that waited out both its timeouts (100 s). Such a turn counts
    like any failed turn: after ``max_failed_turns`` the run stops, the owed fact kept."""
    loop = new_loop(max_failed_turns=3)
    owed = OwedWork(stage="tools", loop_id="L", turn_id="T", inference_id="I", response_open=True)
    call = ToolCallBlock(call_id="c", name="t", arguments="{}")
    records = (UserRecord(message_id="m1", message=ak.user("q")), BlockRecord(block=call))
    batch = (PendingToolCall(internal_id="i0", index=0, call=call),)
    snapshot = Snapshot(records=records, record_count=2, pending=batch, owed=owed)
    pending = list(loop.handle(CompactRequested()))
    stagings = 0
    stopped: list[LoopStopped] = []
    while pending and stagings <= 50:
        effect = pending.pop(0)
        match effect:
            case LoadState():
                pending.extend(loop.handle(Loaded(snapshot=snapshot)))
            case Commit(plan=plan):
                stagings += isinstance(plan, StageOwed)
                unknown = stagings == 1  # the crash in COMMIT; then every write is refused
                failed = CommitFailed(plan=plan, message="disk full", outcome_unknown=unknown)
                pending.extend(loop.handle(failed))
            case RunHook(hook=hook):
                pending.extend(loop.handle(HookFinished(hook=hook)))
            case LoopStopped():
                stopped.append(effect)
    assert stagings == 3, f"{stagings} stagings: the run never counted its failed turns"
    (stop,) = stopped
    assert not stop.settled  # the owed fact is kept: the next start resumes the batch
    assert stop.error == "disk full"
