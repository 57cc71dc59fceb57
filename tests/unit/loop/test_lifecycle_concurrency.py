"""Lifecycle operations racing a running turn (the base runtime's lifecycleConcurrency; the
loop's hook, batch, abort, compaction and shutdown rules; invariants I24, I25,
I12). Races are ordered with gates, never with sleeps; the module timeout turns a deadlock
into a failure.

spec item -> test (``test_`` prefix left off)
- abort during pre-inference hook cancels
    -> an_abort_while_a_pre_inference_hook_runs_cancels_the_turn (before_turn, before_inference)
       and the_actions_of_a_hook_an_abort_arrived_during_are_dropped
- compaction requested in an aborted turn settles
    -> a_compaction_asked_for_in_a_turn_that_is_aborted_is_rejected_and_the_agent_settles
- next inference waits for stream cleanup and aborted tool unwinding
    -> the_next_inference_waits_for_an_aborted_stream_to_close,
       the_next_inference_waits_for_an_aborted_tool_to_unwind
- close is a barrier for already admitted sends (fulfilled, answered, sessions destroyed)
    -> close_waits_for_a_send_admitted_before_it_and_answers_it (also test_lifecycle.py:
       close_admits_nothing_new_and_answers_what_it_admitted)

"Does not happen before" checks use a short bounded wait that must time out (``NOT_YET``): it
orders nothing, it only gives a wrong implementation the chance to show itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest

import agentkeep as ak
from agentkeep._admission import Admission
from agentkeep.actors import agent_children
from agentkeep.providers import script
from agentkeep.types import Context, Done, StreamEvent

from .conftest import EchoArgs, World, text_of

pytestmark = pytest.mark.timeout(30)

TIMEOUT = 10.0
NOT_YET = 0.2


def texts(messages: list[ak.Message]) -> list[str]:
    return [text_of(m) for m in messages]


def answer_last(context: Context) -> script.ScriptedResponse:
    """A response derived from the request (not from request order): 'answer <last text>'."""
    return script.text(f"answer {text_of(context.messages[-1])}")


class HoldFirst(ak.Feature):
    """Holds the loop inside the first call of one hook until the test lets it go (for
    ``before_agent_loop``: the second loop's, the first run being the setup's)."""

    name = "hold-first"

    def __init__(self, hook: str, actions: Sequence[ak.SteerAction] = ()) -> None:
        self.hook = hook
        self.actions = actions
        self.entered = threading.Event()
        self.release = threading.Event()
        self.turns = 0
        self.loops = 0
        self.dones: list[Done] = []

    def _hold(self, hook: str) -> None:
        if hook == self.hook and not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(TIMEOUT)

    def before_agent_loop(self, ctx: ak.HookContext) -> None:
        self.loops += 1
        if self.loops > 1:
            self._hold("before_agent_loop")

    def before_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> Sequence[ak.SteerAction]:
        self.turns += 1
        first = not self.entered.is_set()
        self._hold("before_turn")
        return self.actions if first and self.hook == "before_turn" else ()

    def before_inference(self, ctx: ak.HookContext) -> None:
        self._hold("before_inference")

    def on_event(self, ctx: ak.HookContext, event: StreamEvent) -> None:
        if isinstance(event, Done):
            self.dones.append(event)


@pytest.mark.parametrize("hook", ["before_turn", "before_inference"])
def test_an_abort_while_a_pre_inference_hook_runs_cancels_the_turn(world: World, hook: str) -> None:
    feature = HoldFirst(hook)
    world.model.add(answer_last, answer_last, answer_last)
    system = world.open(features=[feature])
    agent = system.create()
    agent.send(ak.user("q1"))
    assert feature.entered.wait(TIMEOUT)
    agent.abort()  # asked while the hook still runs
    feature.release.set()
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert [d.state for d in feature.dones] == ["cancelled"]
    assert texts(agent.transcript()) == ["q1"]  # the model's answer never landed
    assert agent.state == "idle"

    agent.send(ak.user("q2"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    assert texts(agent.transcript()) == ["q1", "q2", "answer q2"]


def test_the_actions_of_a_hook_an_abort_arrived_during_are_dropped(world: World) -> None:
    feature = HoldFirst("before_turn", actions=(ak.SteerAction(message=ak.user("hook steer")),))
    world.model.add(answer_last, answer_last, answer_last)
    system = world.open(features=[feature])
    agent = system.create()
    agent.send(ak.user("q1"))
    assert feature.entered.wait(TIMEOUT)
    agent.abort()
    feature.release.set()
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    queued = system.internals.store.read(lambda tx: tx.queue.messages(agent.id))
    assert "hook steer" not in [text_of(q.message) for q in queued]
    assert "hook steer" not in texts(agent.transcript())
    agent.send(ak.user("q2"))  # whatever the abort left queued is answered, the steer never
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    assert "hook steer" not in texts(agent.transcript())
    assert texts(agent.transcript())[-1].startswith("answer ")


def test_a_compaction_asked_for_in_a_turn_that_is_aborted_is_rejected_and_the_agent_settles(
    world: World,
) -> None:
    feature = HoldFirst("before_agent_loop")
    world.model.add(script.text("a1"))
    world.model.add_compactions(
        lambda context: script.compacted(ak.user("summary")),
        lambda context: script.compacted(ak.user("summary")),
    )
    system = world.open(features=[feature])
    agent = system.create()
    agent.send(ak.user("q1"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    outcome: list[BaseException | None] = []

    def wait_for_compaction() -> None:
        try:
            agent.compact(wait=True, timeout_seconds=TIMEOUT)
            outcome.append(None)
        except BaseException as error:
            outcome.append(error)

    waiter = threading.Thread(target=wait_for_compaction)
    waiter.start()
    # The request starts a run; its loop hook holds it, and the abort lands in that run.
    assert feature.entered.wait(TIMEOUT)
    agent.abort()
    feature.release.set()
    waiter.join(TIMEOUT)

    (error,) = outcome
    assert isinstance(error, ak.CompactionFailedError), error
    assert "cancelled by an abort" in str(error)
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    assert texts(agent.transcript()) == ["q1", "a1"]
    assert agent.state == "idle"  # settled: nothing is owed for a rejected compaction

    agent.compact(wait=True, timeout_seconds=TIMEOUT)  # the agent is not wedged
    assert texts(agent.transcript()) == ["summary"]


class TurnStarted(ak.Feature):
    name = "turn-started"

    def __init__(self) -> None:
        self.turns = 0
        self.second = threading.Event()

    def before_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> Sequence[ak.SteerAction]:
        self.turns += 1
        if self.turns == 2:
            self.second.set()
        return ()


def recording(order: list[str], name: str) -> Callable[[Context], script.ScriptedResponse]:
    def respond(context: Context) -> script.ScriptedResponse:
        order.append(name)
        return answer_last(context)

    return respond


def test_the_next_inference_waits_for_an_aborted_stream_to_close(world: World) -> None:
    order: list[str] = []
    streaming, let_go = threading.Event(), threading.Event()

    def stubborn(context: Context) -> script.ScriptedResponse:
        streaming.set()
        assert let_go.wait(TIMEOUT)  # ignores cancellation
        order.append("first stream ended")
        return script.text("too late")

    feature = TurnStarted()
    world.model.add(stubborn, recording(order, "second request"))
    system = world.open(features=[feature])
    agent = system.create()
    agent.send(ak.user("q1"))
    assert streaming.wait(TIMEOUT)
    agent.abort(wait=True, timeout_seconds=TIMEOUT)  # the abort does not wait for the stream
    agent.send(ak.user("q2"))
    assert feature.second.wait(TIMEOUT)

    assert not world.model.wait_for_requests(2, timeout_seconds=NOT_YET)
    let_go.set()
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    assert world.model.wait_for_requests(2, timeout_seconds=TIMEOUT)

    assert order == ["first stream ended", "second request"]
    # The first answer never lands; the unanswered q1 joins the next turn's context.
    assert texts(agent.transcript()) == ["q1", "q2", "answer q2"]


def test_the_next_inference_waits_for_an_aborted_tool_to_unwind(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Within its grace an aborted tool is waited for; past it, it is abandoned
    # (test_stray_tools.py). A long grace keeps this ordering free of the machine's pace.
    monkeypatch.setattr(agent_children, "CHILD_GRACE_SECONDS", 60.0)
    order: list[str] = []

    @ak.tool
    def stubborn(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Ignore cancellation; return only when the test says so."""
        world.gate("tool").wait()
        order.append("aborted tool returned")
        return "too late"

    feature = TurnStarted()
    world.model.add(script.tool_call("stubborn", {}), recording(order, "second request"))
    system = world.open(tools=[stubborn], features=[feature])
    agent = system.create()
    agent.send(ak.user("q1"))
    assert world.gate("tool").entered.wait(TIMEOUT)
    agent.abort(wait=True, timeout_seconds=TIMEOUT)  # answered "aborted" without waiting
    agent.send(ak.user("q2"))
    assert feature.second.wait(TIMEOUT)

    assert not world.model.wait_for_requests(2, timeout_seconds=NOT_YET)
    world.gate("tool").release.set()
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    assert world.model.wait_for_requests(2, timeout_seconds=TIMEOUT)

    assert order == ["aborted tool returned", "second request"]
    assert texts(agent.transcript()) == [
        "q1",
        "",
        "The tool call was aborted.",
        "q2",
        "answer q2",
    ]


def test_close_waits_for_a_send_admitted_before_it_and_answers_it(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The send is admitted and held just before its write; close begins; then the write
    goes on. Close must take it as admitted: not refuse it, wait for it, answer it. (Only
    the pacing touches internals: the sender's ``Store.transact`` and a signal when
    ``Admission.begin_close`` is entered.)"""
    world.model.add(answer_last)
    system = world.open()
    agent = system.create(id="barrier")
    admitted, write, closing = threading.Event(), threading.Event(), threading.Event()
    transact = system.internals.store.transact

    def paced(work: Callable[..., Any], **options: Any) -> Any:
        if threading.current_thread().name == "sender":
            admitted.set()
            assert write.wait(TIMEOUT)
        return transact(work, **options)

    begin_close = Admission.begin_close

    def signalled(self: Admission, timeout_seconds: float | None) -> bool:
        closing.set()
        return begin_close(self, timeout_seconds)

    monkeypatch.setattr(system.internals.store, "transact", paced)
    monkeypatch.setattr(Admission, "begin_close", signalled)
    deliveries: list[Any] = []
    sender = threading.Thread(
        target=lambda: deliveries.append(agent.send(ak.user("admitted"))), name="sender"
    )
    closer = threading.Thread(target=system.close, kwargs={"timeout_seconds": TIMEOUT})
    sender.start()
    assert admitted.wait(TIMEOUT)
    closer.start()
    assert closing.wait(TIMEOUT)
    write.set()
    sender.join(TIMEOUT)
    closer.join(TIMEOUT)
    assert not closer.is_alive()

    (delivery,) = deliveries  # fulfilled, not refused
    assert delivery.created
    assert system.internals.store.closed
    (session,) = world.model.model_sessions
    assert world.model.closed_model_sessions == (session.agent_id,)
    with pytest.raises(ak.AgentClosedError):
        agent.send(ak.user("after close"))
    reopened = world.open(resume=False)
    assert texts(reopened.transcript("barrier")) == ["admitted", "answer admitted"]
    assert reopened.internals.store.read(lambda tx: tx.facts.read_owed("barrier")) is None
