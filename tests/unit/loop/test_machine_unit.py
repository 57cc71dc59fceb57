"""The pure core, event by event: no threads, no store — only effects in, events out."""

from __future__ import annotations

import itertools

import agentkeep as ak
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
    CommitLanded,
    HookFinished,
    Loaded,
    StreamEventArrived,
    ToolFinished,
    WorkAccepted,
)
from agentkeep.loop.machine import AgentLoop
from agentkeep.loop.plans import (
    AnswerCalls,
    Appended,
    Consumed,
    ConsumeQueue,
    DispatchBatch,
    FinishResponse,
    Snapshot,
)
from agentkeep.model import (
    BlockRecord,
    Done,
    QueuedMessage,
    Settings,
    TextBlock,
    TextEnd,
    Tokens,
    ToolCallBlock,
    ToolCallEnd,
    ToolCallStart,
    ToolRecord,
    ToolResultMessage,
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

    assert kinds(
        loop.handle(StreamEventArrived(inference_id=iid, event=TextEnd(text="hello")))
    ) == ["Emit"]  # the finished block waits one event: nothing acts on it before the response ends
    done = Done(state="normal", tokens=Tokens(input=10, output=2))
    effects = loop.handle(StreamEventArrived(inference_id=iid, event=done))

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
