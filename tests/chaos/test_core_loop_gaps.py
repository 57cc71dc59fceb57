"""Core-loop consistency gaps (the base runtime's coreLoopConsistencyGaps, adapted to agentkeep).

- a send accepted mid-inference ⇒ two requests in one turn (no phantom turn);
- abort on a normal ``done`` ⇒ exactly one terminal event;
- an external sender cannot split the two steer actions of one hook decision (invariant I2);
- a retained call-scoped store refuses use once its call ended (invariant I20); hook stores are not
  transactional in agentkeep (``HookContext.kv`` is a durable handle, each operation its own
  transaction), so the spec's "retained modelChanged KV" has no counterpart to test;
- a re-entrant close from inside a tool is refused, the system still closes, once (and
  from inside an observing hook);
- an explicit ``start(agent_id)`` answers a question an abort left unanswered (decisions.md).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.types import Context, Done, StreamEvent

TIMEOUT = 10.0


class Args(msgspec.Struct):
    text: str = ""


def _system(home: Path, model: ak.ScriptedModel, **options: Any) -> ak.AgentSystem:
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    return ak.AgentSystem.open(
        home, providers=providers, provider="local", model="gym-1", **options
    )


def _texts(messages: Sequence[ak.Message], kind: type) -> list[str]:
    return [
        "".join(b.text for b in getattr(m, "content", ()) if isinstance(b, ak.TextBlock))
        for m in messages
        if isinstance(m, kind)
    ]


class Turns(ak.Feature):
    name = "turns"

    def __init__(self) -> None:
        self.turns = 0
        self.loops = 0
        self.dones: list[Done] = []

    def before_agent_loop(self, ctx: ak.HookContext) -> None:
        self.loops += 1

    def before_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> None:
        self.turns += 1

    def on_event(self, ctx: ak.HookContext, event: StreamEvent) -> None:
        if isinstance(event, Done):
            self.dones.append(event)


def test_a_send_accepted_mid_inference_costs_two_requests_and_one_turn(tmp_path: Path) -> None:
    inside = threading.Event()
    release = threading.Event()

    def first(context: Context) -> ak.script.ScriptedResponse:
        inside.set()
        assert release.wait(TIMEOUT)
        return script.text("a1")

    turns = Turns()
    model = ak.ScriptedModel([first, script.text("a2"), script.text("never")])
    with _system(tmp_path, model, features=[turns]) as system:
        agent = system.create()
        agent.send(ak.user("q1"))
        assert inside.wait(TIMEOUT)
        agent.send(ak.user("q2"))  # durable while the first inference is in flight
        release.set()
        assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

        assert len(model.requests) == 2
        assert turns.turns == 1, "a phantom turn was started for the mid-inference send"
        assert turns.loops == 1
        assert _texts(agent.transcript(), ak.UserMessage) == ["q1", "q2"]
        assert _texts(agent.transcript(), ak.AssistantMessage) == ["a1", "a2"]


class AbortOnDone(Turns):
    name = "abort-on-done"

    def on_event(self, ctx: ak.HookContext, event: StreamEvent) -> None:
        super().on_event(ctx, event)
        if isinstance(event, Done) and event.state == "normal":
            ctx.system.abort(ctx.agent_id)


def test_a_self_abort_on_a_normal_done_leaves_exactly_one_terminal_event(tmp_path: Path) -> None:
    feature = AbortOnDone()
    model = ak.ScriptedModel([script.text("kept"), script.text("next")])
    with _system(tmp_path, model, features=[feature]) as system:
        agent = system.create()
        agent.send(ak.user("q1"))
        assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
        assert [d.state for d in feature.dones] == ["normal"]
        assert _texts(agent.transcript(), ak.AssistantMessage) == ["kept"]

        agent.send(ak.user("q2"))  # the agent is not wedged by the late abort
        assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
        assert [d.state for d in feature.dones] == ["normal", "normal"]
        assert _texts(agent.transcript(), ak.UserMessage) == ["q1", "q2"]


class HoldDone(Turns):
    """Holds the loop on the terminal event until the test has aborted from outside."""

    name = "hold-done"

    def __init__(self) -> None:
        super().__init__()
        self.at_done = threading.Event()
        self.go_on = threading.Event()

    def on_event(self, ctx: ak.HookContext, event: StreamEvent) -> None:
        super().on_event(ctx, event)
        if isinstance(event, Done) and not self.at_done.is_set():
            self.at_done.set()
            assert self.go_on.wait(TIMEOUT)


def test_an_external_abort_racing_a_normal_done_leaves_exactly_one_terminal_event(
    tmp_path: Path,
) -> None:
    feature = HoldDone()
    model = ak.ScriptedModel([script.text("kept")])
    with _system(tmp_path, model, features=[feature]) as system:
        agent = system.create()
        agent.send(ak.user("q1"))
        assert feature.at_done.wait(TIMEOUT)
        agent.abort()  # requested while the loop still handles the normal done
        feature.go_on.set()
        assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

        assert len(feature.dones) == 1, feature.dones
        transcript = agent.transcript()
        assert _texts(transcript, ak.UserMessage) == ["q1"]
        # Whichever side won, the history holds only finished blocks, at most once.
        assert _texts(transcript, ak.AssistantMessage) in (["kept"], [])
        assert len(model.requests) == 1


class TwoSteers(ak.Feature):
    """After the first turn, one decision steers twice."""

    name = "two-steers"

    def __init__(self) -> None:
        self.fired = False

    def after_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> Sequence[ak.SteerAction]:
        if self.fired:
            return ()
        self.fired = True
        return (
            ak.SteerAction(message=ak.user("hook-1")),
            ak.SteerAction(message=ak.user("hook-2")),
        )


@pytest.mark.parametrize("mode", ["one-at-a-time", "all"])
def test_an_external_steer_cannot_split_one_hook_decisions_two_steers(
    tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deterministic: the moment the hook's first action is written, an outsider's steer is
    submitted and queued at the writer; one decision's actions are one transaction, so the
    outsider lands before or after both of them, never between."""
    from agentkeep.actors import hook_actions

    box: list[ak.AgentSystem] = []
    original = hook_actions.accept_message
    racers: list[threading.Thread] = []

    def accept_then_race(tx: Any, agent_id: str, **options: Any) -> Any:
        result = original(tx, agent_id, **options)
        if _texts([options["message"]], ak.UserMessage) == ["hook-1"]:
            racer = threading.Thread(
                target=box[0].internals.accept,
                args=("hooked", "steering", ak.user("outsider")),
                kwargs={"id": "outsider"},
            )
            racer.start()
            racers.append(racer)
            # The outsider is queued at the writer while this transaction is still open.
            assert box[0].internals.store.handle.wait_for_queued(1, timeout_seconds=TIMEOUT)
        return result

    monkeypatch.setattr(hook_actions, "accept_message", accept_then_race)
    model = ak.ScriptedModel([script.text("ok") for _ in range(6)])
    with _system(tmp_path, model, features=[TwoSteers()], steering_mode=mode) as system:
        box.append(system)
        agent = system.create(id="hooked")
        agent.send(ak.user("q"))
        assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
        users = _texts(agent.transcript(), ak.UserMessage)
        assert "hook-1" in users, users
        assert "hook-2" in users, users
        at = users.index("hook-1")
        assert users[at + 1] == "hook-2", users
        assert "outsider" in users, users
    for racer in racers:
        racer.join(TIMEOUT)


def test_a_retained_call_store_refuses_use_after_its_call(tmp_path: Path) -> None:
    kept: list[Any] = []

    @ak.tool
    def keep(ctx: ak.ToolContext, args: Args) -> str:
        """Write to the call store and keep it."""
        ctx.kv.write("during", 1)
        kept.append(ctx.kv)
        return "kept"

    model = ak.ScriptedModel([script.tool_call("keep", {}), script.text("done")])
    with _system(tmp_path, model, tools=[keep]) as system:
        agent = system.create()
        agent.send(ak.user("go"))
        assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
        with pytest.raises(ak.ExpiredScopeError):
            kept[0].write("after", 2)


def test_a_re_entrant_close_from_a_tool_is_refused_and_the_system_still_closes_once(
    tmp_path: Path,
) -> None:
    box: list[ak.AgentSystem] = []
    refused: list[BaseException] = []

    @ak.tool
    def shut(ctx: ak.ToolContext, args: Args) -> str:
        """Try to close the whole system from inside this agent's loop."""
        try:
            box[0].close()
        except ak.AgentClosedError as error:
            refused.append(error)
        return "asked"

    model = ak.ScriptedModel([script.tool_call("shut", {}), script.text("finished")])
    system = _system(tmp_path, model, tools=[shut])
    box.append(system)
    agent = system.create(id="closer")
    agent.send(ak.user("go"))
    assert model.wait_for_requests(1, timeout_seconds=TIMEOUT)
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    closers = [t for t in threading.enumerate() if t.name == "agentkeep-close"]
    for closer in closers:
        closer.join(TIMEOUT)
        assert not closer.is_alive()

    assert len(refused) == 1
    assert closers, "the refused close must go on in the background"
    assert system.internals.store.closed
    with pytest.raises(ak.AgentClosedError):
        agent.send(ak.user("too late"))
    (session,) = model.model_sessions
    assert model.closed_model_sessions == (session.agent_id,)

    reopened = _system(tmp_path, ak.ScriptedModel())
    try:
        transcript = reopened.transcript("closer")
        assert _texts(transcript, ak.ToolResultMessage) == ["asked"]
        assert _texts(transcript, ak.AssistantMessage)[-1] == "finished"
        assert reopened.internals.store.read(lambda tx: tx.facts.read_owed("closer")) is None
    finally:
        reopened.close(timeout_seconds=TIMEOUT)


def test_an_explicit_start_answers_a_question_an_abort_left_unanswered(tmp_path: Path) -> None:
    model = ak.ScriptedModel([script.hang(), script.text("answered")])
    with _system(tmp_path, model) as system:
        agent = system.create(id="aborted")
        agent.send(ak.user("q1"))
        assert model.wait_for_requests(1, timeout_seconds=TIMEOUT)
        agent.abort(wait=True, timeout_seconds=TIMEOUT)
        assert _texts(agent.transcript(), ak.UserMessage) == ["q1"]
        assert agent.state == "idle"  # not owed: the user cancelled that turn

        assert system.start() == []  # not owed: open alone would not answer it
        assert system.start("aborted") == ["aborted"]  # an explicit start does
        assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
        assert _texts(agent.transcript(), ak.AssistantMessage) == ["answered"]


class CloseOnFirstEvent(ak.Feature):
    name = "close-on-event"

    def __init__(self) -> None:
        self.system: ak.AgentSystem | None = None
        self.refused: list[BaseException] = []
        self.asked = threading.Event()

    def on_event(self, ctx: ak.HookContext, event: StreamEvent) -> None:
        if self.system is None or self.asked.is_set():
            return
        try:
            # A short timeout keeps the self-deadlock of the bug below to one second.
            self.system.close(timeout_seconds=1.0)
        except ak.AgentClosedError as error:
            self.refused.append(error)
        finally:
            self.asked.set()


def test_a_self_close_from_an_observer_is_refused_keeps_the_response_and_closes_once(
    tmp_path: Path,
) -> None:
    feature = CloseOnFirstEvent()
    model = ak.ScriptedModel([script.text("kept", chunks=3)])
    system = _system(tmp_path, model, features=[feature])
    feature.system = system
    try:
        agent = system.create(id="selfclose")
        agent.send(ak.user("q"))
        assert feature.asked.wait(TIMEOUT)
        assert len(feature.refused) == 1, "close from inside the loop was not refused"
        assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    finally:
        for closer in [t for t in threading.enumerate() if t.name == "agentkeep-close"]:
            closer.join(TIMEOUT)
        system.close(timeout_seconds=TIMEOUT)

    (session,) = model.model_sessions
    assert model.closed_model_sessions == (session.agent_id,)
    reopened = _system(tmp_path, ak.ScriptedModel(), resume=False)
    try:
        transcript = reopened.transcript("selfclose")
        assert _texts(transcript, ak.UserMessage) == ["q"]
        assert _texts(transcript, ak.AssistantMessage) == ["kept"]
        assert reopened.internals.store.read(lambda tx: tx.facts.read_owed("selfclose")) is None
    finally:
        reopened.close(timeout_seconds=TIMEOUT)
