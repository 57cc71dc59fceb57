"""Notices at exact positions (docs/notices.md): an injected notice appends after pending tool
results and compaction settled, right before the inference that sees it, exactly once;
``system_notifications_transact`` at the message boundary (each message of an "all" batch,
after a reset) and at the inference boundary (with the request's ids), committed with the
consumption or the inference stage and rolled back with it; ``prepare_inference`` compacts
before a request and is asked again on the replacement, and a failed attempt is not repeated
on the unchanged measurement."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

import agentkeep as ak
from agentkeep.chaos import FaultInjection, FaultPlan
from agentkeep.features import InferenceBoundary, MessageBoundary, NotificationBoundary
from agentkeep.persistence.interface import Transaction
from agentkeep.providers import script
from agentkeep.types import SystemMessage, ToolCallBlock
from agentkeep.types.records import (
    BlockRecord,
    OwedWork,
    PendingToolCall,
    QueuedMessage,
    QueuedNotice,
    UserRecord,
)

from .conftest import World, roles, text_of

CONTINUE = "Continue from where you left off."


def texts(messages: Sequence[object]) -> list[str]:
    return [text_of(m) for m in messages]  # type: ignore[arg-type]


def _seed(world: World, agent_id: str, write: Callable[[Transaction], None]) -> None:
    system = world.open()
    system.create(id=agent_id)
    system.internals.store.transact(write)
    system.close()


class Notify(ak.Feature):
    """Supplies one notice at every boundary, naming it; records what it was told."""

    name = "notify"

    def __init__(self) -> None:
        self.seen: list[tuple[NotificationBoundary, str | None, str | None, str | None]] = []
        self.inference_ids: list[str | None] = []
        self.accepted: list[str] = []

    def system_notifications_transact(
        self, ctx: ak.HookContext, boundary: NotificationBoundary
    ) -> list[SystemMessage]:
        self.seen.append((boundary, ctx.loop_id, ctx.turn_id, ctx.inference_id))
        if isinstance(boundary, MessageBoundary):
            return [ak.system(f"before {boundary.accepted.id}")]
        return [ak.system(f"inference {boundary.inference_id}")]

    def before_inference(self, ctx: ak.HookContext) -> None:
        self.inference_ids.append(ctx.inference_id)

    def message_accepted(self, ctx: ak.HookContext, accepted: ak.MessageAccepted) -> None:
        self.accepted.append(accepted.id)


# -- injected notices --------------------------------------------------------------------


def test_a_queued_notice_appends_after_the_pending_tool_results_right_before_the_request(
    world: World,
) -> None:
    """A notice queued while a dispatched batch is pending (a crash between queuing and
    appending): the results land first, then the notice, then the request — once."""
    call = ToolCallBlock(call_id="c1", name="echo", arguments='{"text": "x"}')

    def write(tx: Transaction) -> None:
        tx.records.append("a1", UserRecord(message_id="m1", message=ak.user("go")))
        tx.records.append("a1", BlockRecord(block=call))
        tx.calls.put("a1", [PendingToolCall(internal_id="i0", index=0, call=call)])
        tx.queue.inject_notice("a1", QueuedNotice(message=ak.system("the notice")))
        tx.facts.write_owed("a1", OwedWork(stage="tools"))

    _seed(world, "a1", write)
    world.model.add(script.text("after"))
    system = world.open()
    assert system.wait_for_idle("a1", timeout_seconds=10)

    (request,) = world.model.requests
    interrupted = "The tool call was interrupted by a restart and was not retried."
    assert roles(request.context.messages) == ["user", "assistant", "tool", "system"]
    assert texts(request.context.messages) == ["go", "", interrupted, "the notice"]
    assert texts(system.transcript("a1")) == ["go", "", interrupted, "the notice", "after"]


class InjectEveryTurn(ak.Feature):
    """Stateless: every ``before_turn`` injects the same notice under the same id (as a hook
    run again after a crash does)."""

    name = "inject"

    def before_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> list[ak.InjectAction]:
        return [ak.InjectAction(message=ak.system("the notice"), id="n1")]


def test_an_inject_with_an_id_is_queued_once_however_often_the_hook_returns_it(
    world: World,
) -> None:
    world.model.add(script.text("one"), script.text("two"))
    system = world.open(features=[InjectEveryTurn()])
    agent = system.create(id="a1")
    agent.send(ak.user("q1"))
    assert agent.wait_for_idle(timeout_seconds=10)
    agent.send(ak.user("q2"))
    assert agent.wait_for_idle(timeout_seconds=10)

    assert texts(agent.transcript()) == ["q1", "the notice", "one", "q2", "two"]
    with pytest.raises(ak.InvalidMessageError):
        ak.InjectAction(message=ak.system("x"), id="Not An Id")


class InjectFreshEachTurn(ak.Feature):
    """Every ``before_turn`` injects a notice under that turn's own id (one notice per
    turn); records the turns it saw."""

    name = "fresh"

    def __init__(self) -> None:
        self.turns: list[str | None] = []

    def before_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> list[ak.InjectAction]:
        self.turns.append(ctx.turn_id)
        if len(self.turns) > 5:  # bounds the failure: the old loop never settled
            return []
        return [
            ak.InjectAction(message=ak.system(f"turn {len(self.turns)}"), id=f"t{len(self.turns)}")
        ]


def test_a_notice_the_turn_itself_injected_and_appended_asks_no_further_turn(
    world: World,
) -> None:
    """A ``before_turn`` notice lands before that turn's own request; its acceptance must
    not ask for another turn (which would inject again, reopen the finished answer with
    "Continue from where you left off." and ask the model again — forever)."""
    world.model.add(script.text("one"), *[script.text("again") for _ in range(6)])
    hooks = InjectFreshEachTurn()
    system = world.open(features=[hooks])
    agent = system.create(id="a1")
    agent.send(ak.user("q1"))
    assert agent.wait_for_idle(timeout_seconds=10)

    assert texts(agent.transcript()) == ["q1", "turn 1", "one"]
    assert len(hooks.turns) == 1
    assert len(world.model.requests) == 1


def _open_crashing(home: Path, model: ak.ScriptedModel, faults: FaultPlan | None) -> ak.AgentSystem:
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    return ak.AgentSystem.open(
        home,
        providers=providers,
        provider="local",
        model="gym-1",
        features=[InjectEveryTurn()],
        testing=FaultInjection(faults=faults),
        restart_intensity=ak.RestartIntensity(max_restarts=1, period_seconds=10.0),
    )


def _answers() -> ak.ScriptedModel:
    return ak.ScriptedModel([script.text("answer") for _ in range(4)])


def _run(system: ak.AgentSystem) -> None:
    agent = system.create(id="a1")
    agent.send(ak.user("q"), id="m1")
    agent.wait_for_idle(timeout_seconds=10)


@pytest.mark.parametrize("part", range(3))
def test_a_crash_at_any_operation_appends_the_injected_notice_exactly_once(
    tmp_path: Path, part: int
) -> None:
    """A crash at every store operation of the reference run (in three interleaved slices),
    then a reopen that resumes: the notice is in the history exactly once, right before the
    answer that saw it, and every request that saw it saw it once."""
    with _open_crashing(tmp_path / "reference", _answers(), None) as system:
        _run(system)
        assert texts(system.transcript("a1")) == ["q", "the notice", "answer"]
        operations = system.internals.store.statistics().operations
    for at in range(1 + part, operations + 1, 3):
        home = tmp_path / f"crash-{at}"
        model = _answers()
        crashing = _open_crashing(home, model, FaultPlan(at=at, mode="crash"))
        try:
            _run(crashing)
        except Exception:  # the crash surfaces wherever it lands
            pass
        finally:
            crashing.close(timeout_seconds=5)
        with _open_crashing(home, model, None) as reopened:
            if "a1" not in [a.id for a in reopened.agents()]:
                continue  # the crash came before the agent existed
            reopened.start("a1")
            assert reopened.wait_for_idle("a1", timeout_seconds=10)
            history = texts(reopened.transcript("a1"))
            where = f"after a crash at operation {at}: {history}"
            if "q" in history:
                assert history.count("the notice") == 1, where
                assert history[-2:] == ["the notice", "answer"], where
            for request in model.requests:
                assert texts(request.context.messages).count("the notice") == 1, where


# -- system_notifications_transact -----------------------------------------------------------


def test_the_message_boundary_comes_before_each_message_of_an_all_batch(world: World) -> None:
    def write(tx: Transaction) -> None:
        for n in (1, 2, 3):
            tx.queue.claim_message_id("a1", f"m{n}")
            entry = QueuedMessage(id=f"m{n}", queue="send", message=ak.user(f"q{n}"))
            tx.queue.enqueue("a1", entry)
        tx.facts.write_owed("a1", OwedWork(stage="inference"))

    _seed(world, "a1", write)
    world.model.add(script.text("all three"))
    notify = Notify()
    system = world.open(features=[notify], send_mode="all")
    assert system.wait_for_idle("a1", timeout_seconds=10)

    (request,) = world.model.requests
    inference_id = notify.inference_ids[0]
    assert texts(request.context.messages) == [
        "before m1",
        "q1",
        "before m2",
        "q2",
        "before m3",
        "q3",
        f"inference {inference_id}",
    ]
    # Each is told its message's original envelope.
    accepted = [b.accepted for b, *_ in notify.seen if isinstance(b, MessageBoundary)]
    assert [(a.id, a.kind, text_of(a.message)) for a in accepted] == [
        ("m1", "send", "q1"),
        ("m2", "send", "q2"),
        ("m3", "send", "q3"),
    ]
    # Plain system records: no acceptance hooks for them.
    assert notify.accepted == ["m1", "m2", "m3"]


def test_the_message_boundary_runs_after_the_reset_its_message_causes(world: World) -> None:
    world.model.add(script.text("first"), script.text("second"))
    notify = Notify()
    system = world.open(features=[notify])
    agent = system.create(id="a1")
    agent.send(ak.user("q1"), id="m1")
    assert agent.wait_for_idle(timeout_seconds=10)
    agent.send(ak.user("q2"), id="m2", profile="other")  # a profile change resets
    assert agent.wait_for_idle(timeout_seconds=10)

    # The reset erased the old history; the notice opens the new one, ahead of its message.
    assert roles(agent.transcript()) == ["system", "user", "system", "assistant"]
    assert texts(agent.transcript())[:2] == ["before m2", "q2"]


def test_the_inference_boundary_is_told_the_requests_ids_and_follows_the_tool_results(
    world: World,
) -> None:
    world.model.add(script.tool_call("echo", {"text": "x"}, call_id="c1"), script.text("done"))
    notify = Notify()
    system = world.open(features=[notify])
    agent = system.create(id="a1")
    agent.send(ak.user("q"), id="m1")
    assert agent.wait_for_idle(timeout_seconds=10)

    first, second = notify.inference_ids
    assert first is not None
    assert second is not None
    assert first != second
    assert texts(agent.transcript()) == [
        "before m1",
        "q",
        f"inference {first}",
        "",
        "echo x",
        f"inference {second}",
        "done",
    ]
    told = [(b, loop, turn, inf) for b, loop, turn, inf in notify.seen]
    boundaries = [t for t in told if isinstance(t[0], InferenceBoundary)]
    assert [b.inference_id for b, *_ in boundaries] == [first, second]
    for boundary, loop_id, turn_id, inference_id in boundaries:
        # The boundary and the context carry the request's lifecycle ids.
        assert (boundary.loop_id, boundary.turn_id) == (loop_id, turn_id)
        assert boundary.inference_id == inference_id
        assert loop_id is not None
        assert turn_id is not None
    # Each notice is the last thing its request saw.
    for request, inference_id in zip(world.model.requests, (first, second), strict=True):
        assert texts(request.context.messages)[-1] == f"inference {inference_id}"


class InjectOnce(ak.Feature):
    name = "inject-once"

    def __init__(self) -> None:
        self.done = False

    def after_agent_loop(self, ctx: ak.HookContext) -> list[ak.InjectAction]:
        if self.done:
            return []
        self.done = True
        return [ak.InjectAction(message=ak.system("injected"))]


class InferenceOnly(ak.Feature):
    name = "inference-only"

    def system_notifications_transact(
        self, ctx: ak.HookContext, boundary: NotificationBoundary
    ) -> list[SystemMessage]:
        return [ak.system("module")] if isinstance(boundary, InferenceBoundary) else []


def test_continue_from_where_you_left_off_stays_ahead_of_the_boundarys_notices(
    world: World,
) -> None:
    world.model.add(script.text("answer"), script.text("more"))
    system = world.open(features=[InjectOnce(), InferenceOnly()])
    agent = system.create()
    agent.send(ak.user("question"))
    assert agent.wait_for_idle(timeout_seconds=10)

    assert texts(world.model.requests[1].context.messages) == [
        "question",
        "module",
        "answer",
        CONTINUE,
        "injected",
        "module",
    ]


class Raising(ak.Feature):
    """Writes to its store, then raises at the boundary named ``at``."""

    name = "raising"

    def __init__(self, at: str) -> None:
        self.at = at

    def before_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> list[ak.InjectAction]:
        if self.at == "message":
            return []
        return [ak.InjectAction(message=ak.system("queued notice"), id="n1")]

    def system_notifications_transact(
        self, ctx: ak.HookContext, boundary: NotificationBoundary
    ) -> list[SystemMessage]:
        ctx.kv.write("written", boundary.type)
        if boundary.type == self.at:
            raise RuntimeError(f"no notices at the {boundary.type} boundary")
        return [ak.system(f"at {boundary.type}")]


def _kv(system: ak.AgentSystem) -> object:
    return system.internals.store.read(lambda tx: tx.kv.scan(""))


@pytest.mark.parametrize("at", ["message", "inference"])
def test_a_raising_notifications_hook_rolls_everything_back_and_no_request_is_made(
    world: World, at: str
) -> None:
    world.model.add(script.text("never"))
    system = world.open(features=[Raising(at)])
    agent = system.create(id="a1")
    agent.send(ak.user("q"), id="m1")
    assert agent.wait_for_idle(timeout_seconds=10)

    assert world.model.requests == ()
    transcript = texts(agent.transcript())
    # Nothing the failed transaction appended is there: the turn failed with its note.
    assert "at inference" not in transcript
    assert transcript[-1].startswith("The last turn failed:")
    assert f"no notices at the {at} boundary" in transcript[-1]
    queued, notices, owed = system.internals.store.read(
        lambda tx: (tx.queue.messages("a1"), tx.queue.notices("a1"), tx.facts.read_owed("a1"))
    )
    assert owed is not None  # the work is still owed
    written = [value for key, value in _kv(system) if key.endswith("written")]  # type: ignore[attr-defined]
    if at == "message":
        assert [m.id for m in queued] == ["m1"]  # the consumption rolled back
        assert transcript == [transcript[-1]]
        assert written == []
    else:
        # The injected notice the failed stage would have appended is still queued.
        assert [n.message for n in notices] == [ak.system("queued notice")]
        assert queued == []  # consumed in its own transaction, before the stage
        assert transcript[:2] == ["at message", "q"]
        assert written == ["message"]  # the message boundary's write; not the stage's


# -- prepare_inference -----------------------------------------------------------------------


class Compactor(ak.Feature):
    """Compacts before a request whenever the last measurement is at least ``threshold``;
    notes the measurement it was told each time."""

    name = "compactor"

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self.told: list[int | None] = []

    def prepare_inference(self, ctx: ak.HookContext) -> ak.CompactAction | None:
        self.told.append(ctx.context_tokens)
        if ctx.context_tokens is not None and ctx.context_tokens >= self.threshold:
            return ak.CompactAction()
        return None


class InjectOnSecondTurn(ak.Feature):
    name = "inject-second"

    def before_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> list[ak.InjectAction]:
        return [ak.InjectAction(message=ak.system("after compaction"), id="n1")]


def test_prepare_inference_compacts_first_then_is_asked_again_on_the_replacement(
    world: World,
) -> None:
    world.model.add(script.text("first", tokens=script.tokens(900, 100)), script.text("second"))
    world.model.add_compactions(script.compacted(ak.system("summary")))
    compactor = Compactor(threshold=1000)
    system = world.open(features=[compactor])
    agent = system.create(id="a1")
    agent.send(ak.user("q1"))
    assert agent.wait_for_idle(timeout_seconds=10)
    system.close()

    # Reopened with a feature that injects on the next turn: the notice lands after the
    # replacement, right before the request.
    system = world.open(features=[compactor, InjectOnSecondTurn()])
    system.send("a1", ak.user("q2"))
    assert system.wait_for_idle("a1", timeout_seconds=10)

    # Asked before each request; the compaction's replacement was prepared again (unmeasured).
    assert compactor.told == [None, 1000, None]
    (compaction,) = world.model.compactions
    assert texts(compaction.context.messages) == ["q1", "first", "q2"]  # q2 had joined
    assert texts(world.model.requests[1].context.messages) == ["summary", "after compaction"]
    assert texts(system.transcript("a1")) == ["summary", "after compaction", "second"]


def test_a_failed_prepare_compaction_is_not_repeated_on_the_unchanged_measurement(
    world: World,
) -> None:
    world.model.add(
        script.text("first", tokens=script.tokens(900, 100)),
        script.error("overloaded"),  # fails without a new measurement
        script.text("second"),
    )
    world.model.add_compactions(script.compaction_failed(), script.compacted(ak.system("s")))
    compactor = Compactor(threshold=1000)
    system = world.open(
        features=[compactor],
        retry_forever=True,
        retry_initial_seconds=0.01,
        retry_max_seconds=0.02,
    )
    agent = system.create(id="a1")
    agent.send(ak.user("q1"))
    assert agent.wait_for_idle(timeout_seconds=10)
    agent.send(ak.user("q2"))
    assert agent.wait_for_idle(timeout_seconds=10)

    # One attempt failed at 1000 tokens; the request went ahead; its failure measured
    # nothing new, so the retry's preparation did not compact again.
    assert len(world.model.compactions) == 1
    assert len(world.model.requests) == 3
    assert compactor.told == [None, 1000, 1000]
    assert texts(agent.transcript())[-1] == "second"


def _compacting_model() -> ak.ScriptedModel:
    small = script.tokens(10, 10)
    model = ak.ScriptedModel(
        [script.text("first", tokens=script.tokens(900, 100))]
        + [script.text("answer", tokens=small) for _ in range(4)]
    )
    model.add_compactions(*(script.compacted(ak.system("summary")) for _ in range(3)))
    return model


def _open_compacting(
    home: Path, model: ak.ScriptedModel, faults: FaultPlan | None
) -> ak.AgentSystem:
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    return ak.AgentSystem.open(
        home,
        providers=providers,
        provider="local",
        model="gym-1",
        features=[Compactor(threshold=1000)],
        testing=FaultInjection(faults=faults),
        restart_intensity=ak.RestartIntensity(max_restarts=1, period_seconds=10.0),
    )


def _compacting_run(system: ak.AgentSystem) -> None:
    agent = system.create(id="a1")
    agent.send(ak.user("q1"), id="m1")
    agent.wait_for_idle(timeout_seconds=10)
    agent.send(ak.user("q2"), id="m2")
    agent.wait_for_idle(timeout_seconds=10)


@pytest.mark.parametrize("part", range(3))
def test_a_crash_around_a_prepare_compaction_still_answers_the_active_turn(
    tmp_path: Path, part: int
) -> None:
    """The replacement is written with the inference it still owes: a crash at any
    operation (between the replacement and the request too), then a reopen, answers the
    question the compaction summarised — the history never ends with the summary."""
    with _open_compacting(tmp_path / "reference", _compacting_model(), None) as system:
        _compacting_run(system)
        assert texts(system.transcript("a1")) == ["summary", "answer"]
        operations = system.internals.store.statistics().operations
    for at in range(1 + part, operations + 1, 3):
        home = tmp_path / f"crash-{at}"
        crashing = _open_compacting(home, _compacting_model(), FaultPlan(at=at, mode="crash"))
        try:
            _compacting_run(crashing)
        except Exception:  # the crash surfaces wherever it lands
            pass
        finally:
            crashing.close(timeout_seconds=5)
        with _open_compacting(home, _compacting_model(), None) as reopened:
            if "a1" not in [a.id for a in reopened.agents()]:
                continue
            # No explicit start: the owed fact alone resumes the agent at open.
            assert reopened.wait_for_idle("a1", timeout_seconds=10)
            transcript = reopened.transcript("a1")
            where = f"after a crash at operation {at}: {texts(transcript)}"
            if transcript:
                assert roles(transcript)[-1] == "assistant", where
            owed = reopened.internals.store.read(lambda tx: tx.facts.read_owed("a1"))
            assert owed is None, where


def _open_notifying(
    home: Path, model: ak.ScriptedModel, faults: FaultPlan | None
) -> ak.AgentSystem:
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    return ak.AgentSystem.open(
        home,
        providers=providers,
        provider="local",
        model="gym-1",
        tools=World(home).tools(),
        features=[Notify()],
        testing=FaultInjection(faults=faults),
        restart_intensity=ak.RestartIntensity(max_restarts=1, period_seconds=10.0),
    )


def _tool_then_answer() -> ak.ScriptedModel:
    return ak.ScriptedModel(
        [script.tool_call("echo", {"text": "x"}, call_id="c1")]
        + [script.text("answer") for _ in range(4)]
    )


@pytest.mark.parametrize("part", range(3))
def test_a_crash_at_any_operation_keeps_each_boundary_notice_once_in_place(
    tmp_path: Path, part: int
) -> None:
    """Both boundaries through a crash at every store operation, then a reopen: each
    message's notice is in the history once, right before its message; each request's
    notice once; and every request the model saw ended with its own inference notice."""
    with _open_notifying(tmp_path / "reference", _tool_then_answer(), None) as system:
        _run(system)
        history = texts(system.transcript("a1"))
        assert history[:2] == ["before m1", "q"]
        assert history[-1] == "answer"
        assert len([t for t in history if t.startswith("inference ")]) == 2
        operations = system.internals.store.statistics().operations
    assert operations > 20
    for at in range(1 + part, operations + 1, 3):
        home = tmp_path / f"crash-{at}"
        model = _tool_then_answer()
        crashing = _open_notifying(home, model, FaultPlan(at=at, mode="crash"))
        try:
            _run(crashing)
        except Exception:  # the crash surfaces wherever it lands
            pass
        finally:
            crashing.close(timeout_seconds=5)
        with _open_notifying(home, model, None) as reopened:
            if "a1" not in [a.id for a in reopened.agents()]:
                continue
            assert reopened.wait_for_idle("a1", timeout_seconds=10)
            history = texts(reopened.transcript("a1"))
            where = f"after a crash at operation {at}: {history}"
            if "q" in history:
                assert history.count("before m1") == 1, where
                assert history[history.index("q") - 1] == "before m1", where
            inference = [t for t in history if t.startswith("inference ")]
            assert len(inference) == len(set(inference)), where
            for request in model.requests:
                assert texts(request.context.messages)[-1].startswith("inference "), where


class AlwaysCompact(ak.Feature):
    name = "always-compact"

    def __init__(self) -> None:
        self.asked = 0

    def prepare_inference(self, ctx: ak.HookContext) -> ak.CompactAction:
        self.asked += 1
        return ak.CompactAction()


def test_an_unmeasured_replacement_is_not_compacted_again(world: World) -> None:
    """A hook that always asks compacts once per measurement: the replacement nothing has
    measured yet goes to the provider (no livelock)."""
    world.model.add(script.text("first"), script.text("second"))
    world.model.add_compactions(*(script.compacted(ak.system("summary")) for _ in range(3)))
    always = AlwaysCompact()
    system = world.open(features=[always])
    agent = system.create(id="a1")
    agent.send(ak.user("q1"))
    assert agent.wait_for_idle(timeout_seconds=10)
    agent.send(ak.user("q2"))
    assert agent.wait_for_idle(timeout_seconds=10)

    # q1: compacted once, asked again on the replacement (ignored), answered; q2 the same.
    assert len(world.model.compactions) == 2
    assert always.asked == 4
    assert texts(agent.transcript()) == ["summary", "second"]
