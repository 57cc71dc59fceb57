"""Feature consistency races (the base runtime's moduleConsistencyRaces, adapted).

- scopes colliding through a dot: a feature named ``alpha.beta`` and a feature ``alpha``
  writing key ``beta.state`` never alias, in ``kv``, ``run_kv`` or ``shared_kv``;
- a half-finished spawn: agentkeep has no atomic "create a child with its first message"
  (``create`` and ``send`` are two calls), so the spawn the spec describes cannot be
  half-claimed *inside* one operation; what must hold is that a spawn whose first message is
  refused leaves a whole, idle child that a retry can reuse (``AgentExistsError`` for the id,
  never a phantom owed turn), that a failed ``create`` claims nothing, and that a spawn cut
  between ``create`` and the first ``send`` (owner closed with the tool abandoned) is finished
  exactly once by a durable tool on resume while the abandoned run can no longer send;
- a lost completion: a child reporting to its busy parent lands in the parent's conversation
  exactly once, even when re-offered (also across a restart);
- a lost update: agents bumping one ``shared_kv`` counter with compare-and-set lose none.
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
from agentkeep.types import Context, ToolResultMessage, UserMessage

TIMEOUT = 10.0


class Args(msgspec.Struct):
    text: str = ""


def _system(home: Path, model: Any, **options: Any) -> ak.AgentSystem:
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    return ak.AgentSystem.open(
        home, providers=providers, provider="local", model="gym-1", **options
    )


def _text(message: ak.Message) -> str:
    blocks = getattr(message, "content", ())
    return "".join(b.text for b in blocks if isinstance(b, ak.TextBlock))


def _users(messages: Sequence[ak.Message]) -> list[str]:
    return [_text(m) for m in messages if isinstance(m, UserMessage)]


# -- scopes colliding through a dot ----------------------------------------------------------


class Writer(ak.Feature):
    def __init__(self, name: str, key: str, value: str) -> None:
        self.name = name
        self.key = key
        self.value = value
        self.seen: dict[str, Any] = {}

    def before_agent_loop(self, ctx: ak.HookContext) -> None:
        for label, store in (("kv", ctx.kv), ("run", ctx.run_kv), ("shared", ctx.shared_kv)):
            store.write(self.key, f"{label}:{self.value}")

    def after_inference(self, ctx: ak.HookContext, inference: ak.InferenceInfo) -> None:
        for label, store in (("kv", ctx.kv), ("run", ctx.run_kv), ("shared", ctx.shared_kv)):
            self.seen[label] = (store.read(self.key), sorted(k for k, _ in store.list()))


def test_a_dotted_feature_name_and_a_dotted_key_never_alias(tmp_path: Path) -> None:
    dotted = Writer("alpha.beta", "state", "dotted-name")
    plain = Writer("alpha", "beta.state", "dotted-key")
    nested = Writer("alpha%2Ebeta", "state", "escaped-look-alike")
    model = ak.ScriptedModel([script.text("ok")])
    with _system(tmp_path, model, features=[dotted, plain, nested]) as system:
        agent = system.create()
        agent.send(ak.user("go"))
        assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    for feature in (dotted, plain, nested):
        for label in ("kv", "run", "shared"):
            value, keys = feature.seen[label]
            assert value == f"{label}:{feature.value}", (feature.name, label, feature.seen)
            assert keys == [feature.key], (feature.name, label, keys)


# -- half-finished spawn ---------------------------------------------------------------------


def test_a_spawn_whose_first_message_is_refused_leaves_a_whole_idle_child(
    tmp_path: Path,
) -> None:
    outcomes: list[str] = []

    @ak.tool
    def spawn(ctx: ak.ToolContext, args: Args) -> str:
        """Create the child and give it its first task (retrying once on refusal)."""
        system = ctx.system
        try:
            child = system.create(id="kid")
        except ak.AgentExistsError:
            outcomes.append("exists")
            child = system.resolve("kid")
        try:
            child.send(ak.user(args.text), id="task")
        except ak.InvalidMessageError:
            outcomes.append("refused")
            return "the task was refused"
        outcomes.append("sent")
        return "spawned"

    model = ak.ScriptedModel(
        [
            script.tool_call("spawn", {"text": ""}),  # an empty task is refused
            script.text("spawn failed"),
            script.tool_call("spawn", {"text": "real task"}),
            script.text("spawned"),
            script.text("child answer"),
        ]
    )
    with _system(tmp_path, model, tools=[spawn]) as system:
        parent = system.create(id="parent")
        parent.send(ak.user("spawn it"))
        assert parent.wait_for_idle(timeout_seconds=TIMEOUT)

        assert outcomes == ["refused"]
        assert system.parent_of("kid") == "parent"
        assert system.resolve("kid").transcript() == []
        assert system.state("kid") == "idle"  # no owed fact, no phantom turn
        assert system.internals.store.read(lambda tx: tx.queue.messages("kid")) == []

        parent.send(ak.user("try again"))
        assert parent.wait_for_idle(timeout_seconds=TIMEOUT)
        assert system.wait_for_idle("kid", timeout_seconds=TIMEOUT)
        assert outcomes == ["refused", "exists", "sent"]
        assert system.children_of("parent") == ["kid"]
        assert _users(system.transcript("kid")) == ["real task"]


class Strict(ak.Feature):
    name = "strict"

    def validate_settings(self, settings: dict[str, Any]) -> None:
        raise ak.InvalidConfigError("never valid")


def _create(
    system: ak.AgentSystem,
    config: ak.AgentConfig | None,
    agent_id: str,
    start: threading.Barrier,
    outcomes: list[str],
) -> None:
    start.wait()
    try:
        system.create(config, id=agent_id)
        outcomes.append("created")
    except ak.AgentkeepError as error:
        outcomes.append(type(error).__name__)


def test_creators_racing_with_a_failing_create_leave_the_id_to_the_valid_one(
    tmp_path: Path,
) -> None:
    with _system(tmp_path, ak.ScriptedModel(), features=[Strict()]) as system:
        bad = ak.AgentConfig(features={"strict": {}})
        for round_ in range(8):
            agent_id = f"spawn{round_}"
            start = threading.Barrier(2, timeout=TIMEOUT)
            outcomes: list[str] = []
            threads = [
                threading.Thread(target=_create, args=(system, config, agent_id, start, outcomes))
                for config in (bad, None)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(TIMEOUT)
            assert sorted(outcomes) == ["InvalidConfigError", "created"], outcomes
            assert system.resolve(agent_id).transcript() == []


# -- lost completion -------------------------------------------------------------------------


def _route(context: Context) -> ak.script.ScriptedResponse:
    """One router for both agents: the answer depends only on the conversation."""
    last = context.messages[-1]
    if isinstance(last, UserMessage):
        text = _text(last)
        if text == "go":
            return script.tool_calls(
                script.call("spawn", {}, call_id="spawn"),
                script.call("wait", {"text": "busy"}, call_id="busy"),
            )
        if text == "child task":
            return script.tool_call("report", {}, call_id="report")
        return script.text(f"noted {text}")
    if isinstance(last, ToolResultMessage) and last.call_id == "report":
        return script.text("child done")
    return script.text("parent done")


def test_a_childs_report_to_its_busy_parent_lands_exactly_once(tmp_path: Path) -> None:
    release = threading.Event()
    busy = threading.Event()
    reported = threading.Event()
    children: list[str] = []

    @ak.tool
    def spawn(ctx: ak.ToolContext, args: Args) -> str:
        """Create a child and hand it a task."""
        child = ctx.system.create()
        children.append(child.id)
        child.send(ak.user("child task"), id="childtask")
        return str(child.id)

    @ak.tool
    def wait(ctx: ak.ToolContext, args: Args) -> str:
        """Keep the parent busy until the test releases it."""
        busy.set()
        assert release.wait(TIMEOUT)
        return "waited"

    @ak.tool
    def report(ctx: ak.ToolContext, args: Args) -> str:
        """Report back to the parent; a retry re-offers the same id."""
        system = ctx.system
        parent_id = system.parent_of(ctx.agent_id)
        assert parent_id is not None
        parent = system.resolve(parent_id)
        first = parent.send(ak.user(f"report from {ctx.agent_id}"), id=f"report{ctx.agent_id}")
        again = parent.send(ak.user(f"report from {ctx.agent_id}"), id=f"report{ctx.agent_id}")
        assert (first.created, again.created) == (True, False)
        reported.set()
        return "reported"

    model = ak.ScriptedModel([_route for _ in range(12)])
    with _system(tmp_path, model, tools=[spawn, wait, report]) as system:
        parent = system.create(id="parent")
        parent.send(ak.user("go"))
        assert busy.wait(TIMEOUT)
        assert reported.wait(TIMEOUT)  # the report is durable while the parent is busy
        (child,) = children
        assert system.wait_for_idle(child, timeout_seconds=TIMEOUT)
        release.set()
        assert parent.wait_for_idle(timeout_seconds=TIMEOUT)

        transcript = system.transcript("parent")
        users = _users(transcript)
        assert users == ["go", f"report from {child}"], transcript
        assert _text(transcript[-1]) == f"noted report from {child}"
        assert _text(system.transcript(child)[-1]) == "child done"
        assert system.state("parent") == system.state(child) == "idle"


@pytest.mark.parametrize("restart", [False, True])
def test_a_report_offered_again_after_a_restart_is_not_answered_twice(
    tmp_path: Path, restart: bool
) -> None:
    model = ak.ScriptedModel([_route for _ in range(6)])
    system = _system(tmp_path, model, tools=[])
    system.create(id="parent")
    system.internals.accept(
        "parent", "send", ak.user("report from kid"), id="reportkid", start=False
    )
    if restart:
        system.close(timeout_seconds=TIMEOUT)
        system = _system(tmp_path, model, tools=[])
    try:
        again = system.internals.accept(
            "parent", "send", ak.user("report from kid"), id="reportkid"
        )
        assert again.created is False
        system.start()
        assert system.wait_for_idle("parent", timeout_seconds=TIMEOUT)
        assert _users(system.transcript("parent")) == ["report from kid"]
        assert len(model.requests) == 1
    finally:
        system.close(timeout_seconds=TIMEOUT)


def _spawn_route(context: Context) -> ak.script.ScriptedResponse:
    last = context.messages[-1]
    if isinstance(last, UserMessage) and _text(last) == "go":
        return script.tool_call("spawn", {}, call_id="sp")
    if isinstance(last, UserMessage):
        return script.text(f"did {_text(last)}")
    return script.text("parent done")


def test_a_spawn_cut_between_create_and_first_message_is_finished_once_on_resume(
    tmp_path: Path,
) -> None:
    """The first owner dies (closes with the tool abandoned) right after the child's id is
    claimed and before its task is sent. A durable spawn tool with ids derived from its call
    finishes the spawn on resume: the claimed id is reused, the task lands once, and the
    abandoned first run can no longer send anything."""
    created = threading.Event()
    release = threading.Event()
    late: list[BaseException] = []
    late_done = threading.Event()
    runs: list[str] = []

    @ak.tool(durable=True)
    def spawn(ctx: ak.ToolContext, args: Args) -> str:
        """Create the child for this call (idempotently) and send its task once."""
        system = ctx.system
        kid = f"kid{ctx.provider_call_id}"
        runs.append(kid)
        try:
            child = system.create(id=kid)
        except ak.AgentExistsError:
            child = system.resolve(kid)
        if len(runs) == 1:  # the first owner is cut off here
            created.set()
            assert release.wait(TIMEOUT)
            try:
                child.send(ak.user("task"), id=f"task{kid}")
            except ak.AgentkeepError as error:
                late.append(error)
                raise
            finally:
                late_done.set()
        else:
            child.send(ak.user("task"), id=f"task{kid}")
        return kid

    first = _system(tmp_path, ak.ScriptedModel([_spawn_route] * 4), tools=[spawn])
    parent = first.create(id="parent")
    parent.send(ak.user("go"))
    assert created.wait(TIMEOUT)
    first.close(timeout_seconds=0.2)  # the tool is still blocked: it is abandoned
    release.set()

    model = ak.ScriptedModel([_spawn_route] * 4)
    with _system(tmp_path, model, tools=[spawn]) as second:
        assert second.wait_for_idle("parent", timeout_seconds=TIMEOUT)
        assert second.wait_for_idle("kidsp", timeout_seconds=TIMEOUT)
        assert runs == ["kidsp", "kidsp"]
        assert second.children_of("parent") == ["kidsp"]
        assert _users(second.transcript("kidsp")) == ["task"]
        assert _text(second.transcript("kidsp")[-1]) == "did task"
        assert _text(second.transcript("parent")[-1]) == "parent done"
    assert late_done.wait(TIMEOUT)
    assert [type(e) for e in late] == [ak.AgentClosedError], "the abandoned run sent the task"


class SharedCounter(ak.Feature):
    """Every agent's every response bumps one system-wide counter (compare-and-set)."""

    name = "counter"

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bumps = 0
        self.retries = 0

    def after_inference(self, ctx: ak.HookContext, inference: ak.InferenceInfo) -> None:
        ctx.shared_kv.get_or_create("count", lambda: 0)
        while True:
            current = ctx.shared_kv.read("count")
            assert current is not None  # created above and never deleted
            if ctx.shared_kv.compare_and_set("count", current, current + 1):
                break
            with self.lock:
                self.retries += 1
        with self.lock:
            self.bumps += 1


def test_agents_bumping_one_shared_counter_lose_no_update(tmp_path: Path) -> None:
    counter = SharedCounter()
    agents, rounds = 4, 3
    model = ak.ScriptedModel([script.text("ok") for _ in range(agents * rounds)])
    with _system(tmp_path, model, features=[counter]) as system:
        handles = [system.create() for _ in range(agents)]
        for n in range(rounds):
            for agent in handles:
                agent.send(ak.user(f"q{n}"))
        for agent in handles:
            assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
        assert counter.bumps == agents * rounds
        assert (
            system.internals.store.kv("system", "feature", "counter").read("count")
            == agents * rounds
        )
