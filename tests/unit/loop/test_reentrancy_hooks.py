"""Re-entrancy from an agent's own hooks (the base runtime's hookReentrancy; the loop's run rule).

A hook runs in its agent's actor (or a tool call's thread): whatever it asks of its own agent
must either not wait (send/steer return once durable, compact/abort return once asked) or be
refused promptly (``close`` → ``AgentClosedError``, any ``wait=True`` → ``AwaitFromOwnLoopError``).
Every test would hang on a deadlock; the module timeout turns that into a failure.

spec item -> test (``test_`` prefix left off; a file name means an earlier test covers it)
- onEvent: self-send once, no ghost turn
    -> test_reentrancy.py: a_self_send_from_on_event_is_answered_once_without_a_ghost_turn
- onEvent: self-steer beats a queued send
    -> a_self_steer_from_on_event_outranks_a_send_queued_before_it
- onEvent: abort => one cancelled
    -> a_self_abort_from_on_event_ends_the_response_with_one_cancelled_event
- onEvent: self-close keeps the response
    -> test_core_loop_gaps.py: a_self_close_from_an_observer_is_refused_keeps_the_response_…
- onEvent: compaction scheduled
    -> a_compaction_asked_from_on_event_runs_after_the_response
- awaited self-send in beforeTurn lands in the same turn
    -> a_self_send_from_before_turn_is_answered_in_the_same_turn
- steer in afterInference lands in the same turn
    -> a_self_steer_from_after_inference_is_answered_in_the_same_turn
- self-abort in beforeInference doesn't deadlock
    -> a_self_abort_from_before_inference_cancels_the_turn
- self-close in afterTurn doesn't deadlock
    -> a_self_close_from_after_turn_is_refused_and_the_system_closes_once
- afterAgentSettled may self-send (one fresh turn)
    -> after_agent_settled_may_self_send_and_gets_one_fresh_run
- afterAgentSettled may await compaction
    -> after_agent_settled_may_ask_for_a_compaction_but_never_wait_for_it. Python mapping: a
       hook runs on its agent's own actor, so a compaction it waited for could never run; refs
       only *ask* for one, and a captured system's ``compact(wait=True)`` is refused with
       ``AwaitFromOwnLoopError`` at once instead of hanging.
- modelChanged may send to self/others via the system
    -> model_changed_may_send_to_itself_and_to_others
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.types import Context, Done, StreamEvent, TextEnd

from .conftest import World, text_of

pytestmark = pytest.mark.timeout(30)

TIMEOUT = 10.0


def texts(agent: ak.Agent) -> list[str]:
    return [text_of(m) for m in agent.transcript()]


def answer_last(context: Context) -> script.ScriptedResponse:
    """A response derived from the request (not from request order): 'answer <last text>'."""
    return script.text(f"answer {text_of(context.messages[-1])}")


class Recorder(ak.Feature):
    """Counts loops, turns and settlements and keeps every terminal event; each subclass adds
    one re-entrant act (``asked`` once made; ``refused`` what was refused; ``system`` is the
    system itself, for what refs do not offer)."""

    name = "recorder"

    def __init__(self) -> None:
        self.loops = 0
        self.turns = 0
        self.dones: list[Done] = []
        self.settled = 0
        self.asked = threading.Event()
        self.refused: list[BaseException] = []
        self.system: ak.AgentSystem | None = None

    def before_agent_loop(self, ctx: ak.HookContext) -> None:
        self.loops += 1

    def before_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> Sequence[ak.SendAction]:
        self.turns += 1
        return ()

    def on_event(self, ctx: ak.HookContext, event: StreamEvent) -> None:
        if isinstance(event, Done):
            self.dones.append(event)

    def after_agent_settled(self, ctx: ak.HookContext, error: str | None) -> None:
        self.settled += 1


# -- on_event ----------------------------------------------------------------------------------


class SteerOnFirstDone(Recorder):
    def on_event(self, ctx: ak.HookContext, event: StreamEvent) -> None:
        super().on_event(ctx, event)
        if isinstance(event, Done) and len(self.dones) == 1:
            ctx.system.resolve(ctx.agent_id).steer(ak.user("steer"))


def test_a_self_steer_from_on_event_outranks_a_send_queued_before_it(world: World) -> None:
    inside, release = threading.Event(), threading.Event()

    def first(context: Context) -> script.ScriptedResponse:
        inside.set()
        assert release.wait(TIMEOUT)
        return script.text("a1")

    world.model.add(first, answer_last, answer_last)
    recorder = SteerOnFirstDone()
    system = world.open(features=[recorder])
    agent = system.create()
    agent.send(ak.user("q1"))
    assert inside.wait(TIMEOUT)
    agent.send(ak.user("send"))  # durable (and known to the loop) before the steer
    release.set()
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert texts(agent) == ["q1", "a1", "steer", "answer steer", "send", "answer send"]


class AbortOnTextEnd(Recorder):
    def on_event(self, ctx: ak.HookContext, event: StreamEvent) -> None:
        super().on_event(ctx, event)
        if isinstance(event, TextEnd) and not self.dones:
            ctx.system.abort(ctx.agent_id)


def test_a_self_abort_from_on_event_ends_the_response_with_one_cancelled_event(
    world: World,
) -> None:
    recorder = AbortOnTextEnd()
    # The response hangs after its first block: only the hook's abort can end it.
    kept = [s for s in script.text("kept").steps if not isinstance(s, Done)]
    world.model.add(script.hang(before=kept), answer_last)
    system = world.open(features=[recorder])
    agent = system.create()
    agent.send(ak.user("q1"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert [d.state for d in recorder.dones] == ["cancelled"]
    assert texts(agent) == ["q1", "kept"]  # the finished block stays
    assert agent.state == "idle"

    agent.send(ak.user("q2"))  # the agent is not wedged by its own abort
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    assert texts(agent)[-1] == "answer q2"
    assert [d.state for d in recorder.dones] == ["cancelled", "normal"]


class CompactOnTextEnd(Recorder):
    def on_event(self, ctx: ak.HookContext, event: StreamEvent) -> None:
        super().on_event(ctx, event)
        if isinstance(event, TextEnd) and not self.asked.is_set():
            ctx.system.compact(ctx.agent_id)  # a request: returns at once
            self.asked.set()


def test_a_compaction_asked_from_on_event_runs_after_the_response(world: World) -> None:
    recorder = CompactOnTextEnd()
    seen: list[bool] = []

    def compaction(context: Context) -> Any:
        seen.append(recorder.asked.is_set())
        return script.compacted(ak.user("summary"))

    world.model.add(script.text("a1"))
    world.model.add_compactions(compaction)
    system = world.open(features=[recorder])
    agent = system.create()
    agent.send(ak.user("q1"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert seen == [True]  # the hook did not wait for the compaction it asked for
    assert texts(agent) == ["summary"]  # it ran once the response had landed
    assert len(world.model.compactions) == 1
    assert len(world.model.requests) == 1  # a standalone compaction owes no answer
    assert agent.state == "idle"


# -- turn and inference hooks ------------------------------------------------------------------


class SendInFirstBeforeTurn(Recorder):
    def before_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> Sequence[ak.SendAction]:
        super().before_turn(ctx, turn)
        if self.turns == 1:
            delivery = ctx.system.send(ctx.agent_id, ak.user("from before_turn"))
            assert delivery.created  # durable when send returns, without waiting for the loop
        return ()


def test_a_self_send_from_before_turn_is_answered_in_the_same_turn(world: World) -> None:
    recorder = SendInFirstBeforeTurn()
    world.model.add(answer_last, answer_last, answer_last)
    system = world.open(features=[recorder])
    agent = system.create()
    agent.send(ak.user("q1"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert texts(agent) == ["q1", "answer q1", "from before_turn", "answer from before_turn"]
    assert (recorder.loops, recorder.turns, recorder.settled) == (1, 1, 1)
    assert len(world.model.requests) == 2


class SteerAfterFirstInference(Recorder):
    def after_inference(self, ctx: ak.HookContext, inference: ak.InferenceInfo) -> None:
        if len(self.dones) == 1:
            ctx.system.steer(ctx.agent_id, ak.user("steer"))


def test_a_self_steer_from_after_inference_is_answered_in_the_same_turn(world: World) -> None:
    recorder = SteerAfterFirstInference()
    world.model.add(answer_last, answer_last, answer_last)
    system = world.open(features=[recorder])
    agent = system.create()
    agent.send(ak.user("q1"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert texts(agent) == ["q1", "answer q1", "steer", "answer steer"]
    assert (recorder.loops, recorder.turns, recorder.settled) == (1, 1, 1)


class AbortInFirstBeforeInference(Recorder):
    def before_inference(self, ctx: ak.HookContext) -> None:
        if not self.dones:  # the first inference
            ctx.system.abort(ctx.agent_id)


def test_a_self_abort_from_before_inference_cancels_the_turn(world: World) -> None:
    recorder = AbortInFirstBeforeInference()
    world.model.add(answer_last, answer_last)
    system = world.open(features=[recorder])
    agent = system.create()
    agent.send(ak.user("q1"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    # The abort is handled before any event of the response reaches the loop.
    assert [d.state for d in recorder.dones] == ["cancelled"]
    assert texts(agent) == ["q1"]
    assert agent.state == "idle"  # the user cancelled that turn: not owed (decisions.md)

    agent.send(ak.user("q2"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    assert texts(agent)[-1].startswith("answer ")
    assert recorder.dones[-1].state == "normal"


class CloseInAfterTurn(Recorder):
    def after_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> Sequence[ak.SendAction]:
        if self.system is not None and not self.asked.is_set():
            try:
                self.system.close(timeout_seconds=TIMEOUT)
            except ak.AgentClosedError as error:
                self.refused.append(error)
            finally:
                self.asked.set()
        return ()


def test_a_self_close_from_after_turn_is_refused_and_the_system_closes_once(
    world: World,
) -> None:
    recorder = CloseInAfterTurn()
    world.model.add(script.text("a1"))
    system = world.open(features=[recorder])
    recorder.system = system
    agent = system.create(id="closer")
    agent.send(ak.user("q1"))
    assert recorder.asked.wait(TIMEOUT)
    for closer in [t for t in threading.enumerate() if t.name == "agentkeep-close"]:
        closer.join(TIMEOUT)
        assert not closer.is_alive()

    (refused,) = recorder.refused
    assert "cannot finish" in str(refused)
    assert system.internals.store.closed  # the background close finished the turn, then closed
    (session,) = world.model.model_sessions
    assert world.model.closed_model_sessions == (session.agent_id,)
    reopened = world.open(resume=False)
    assert [text_of(m) for m in reopened.transcript("closer")] == ["q1", "a1"]
    assert reopened.internals.store.read(lambda tx: tx.facts.read_owed("closer")) is None


# -- after_agent_settled -----------------------------------------------------------------------


class SendOnceSettled(Recorder):
    def after_agent_settled(self, ctx: ak.HookContext, error: str | None) -> None:
        super().after_agent_settled(ctx, error)
        if self.settled == 1:
            ctx.system.resolve(ctx.agent_id).send(ak.user("hook send"))


def test_after_agent_settled_may_self_send_and_gets_one_fresh_run(world: World) -> None:
    recorder = SendOnceSettled()
    world.model.add(answer_last, answer_last, answer_last)
    system = world.open(features=[recorder])
    agent = system.create()
    agent.send(ak.user("q1"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert texts(agent) == ["q1", "answer q1", "hook send", "answer hook send"]
    assert (recorder.loops, recorder.turns, recorder.settled) == (2, 2, 2)
    assert len(world.model.requests) == 2


class CompactOnceSettled(Recorder):
    def after_agent_settled(self, ctx: ak.HookContext, error: str | None) -> None:
        super().after_agent_settled(ctx, error)
        if self.settled != 1 or self.system is None:
            return
        try:
            self.system.compact(ctx.agent_id, wait=True, timeout_seconds=TIMEOUT)
        except ak.AwaitFromOwnLoopError as error:
            self.refused.append(error)
        ctx.system.compact(ctx.agent_id)  # asking (not waiting) is what a hook may do


def test_after_agent_settled_may_ask_for_a_compaction_but_never_wait_for_it(
    world: World,
) -> None:
    recorder = CompactOnceSettled()
    world.model.add(script.text("a1"))
    world.model.add_compactions(script.compacted(ak.user("summary")))
    system = world.open(features=[recorder])
    recorder.system = system
    agent = system.create()
    agent.send(ak.user("q1"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert len(recorder.refused) == 1  # refused at once, not a hang
    assert texts(agent) == ["summary"]
    assert len(world.model.compactions) == 1
    assert len(world.model.requests) == 1  # a standalone compaction owes no answer
    assert recorder.settled == 2  # the compaction's run settled too
    assert agent.state == "idle"


# -- model_changed -----------------------------------------------------------------------------


class SendOnModelChange(ak.Feature):
    name = "switch-sender"

    def __init__(self) -> None:
        self.other: str | None = None
        self.failures: list[BaseException] = []

    def model_changed(self, ctx: ak.HookContext, change: ak.ModelChange) -> None:
        try:
            if self.other is not None:
                ctx.system.send(self.other, ak.user(f"{ctx.agent_id} switched"))
            ctx.system.send(ctx.agent_id, ak.user("note to self"))
        except Exception as error:
            self.failures.append(error)
            raise


def test_model_changed_may_send_to_itself_and_to_others(world: World) -> None:
    feature = SendOnModelChange()
    world.model = ak.ScriptedModel(models=("anthropic/claude-a", "anthropic/claude-b"))
    providers = ak.Providers()
    providers.add("claude", world.model, kind="claude")
    world.model.add(*[answer_last for _ in range(4)])
    system = world.open(
        providers=providers, provider="claude", model="anthropic/claude-a", features=[feature]
    )
    agent, other = system.create(), system.create()
    feature.other = other.id
    agent.send(ak.user("q1"), model="anthropic/claude-b")  # the first consumption switches
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    assert system.wait_for_idle(other.id, timeout_seconds=TIMEOUT)
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    assert feature.failures == []
    assert texts(other) == [f"{agent.id} switched", f"answer {agent.id} switched"]
    assert texts(agent).count("note to self") == 1
    assert texts(agent)[-1] == "answer note to self"
