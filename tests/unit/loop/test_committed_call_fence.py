"""A call whose result a tool committed (``ctx.commit``) never runs again — also when the run
that committed it was cut off from its agent while its claim was on the way to the store
(flaky_store seed 6827, invariant X2).

The race: a run of a durable tool passes ``ctx.commit``'s liveness check and sends its claim to
the writer; before the claim commits, its agent lets go of the run (a crash whose grace the
run outlived, or a commit whose outcome was unknown: ``continue_from_store``), reads the store,
finds the call still uncommitted and resumes it — a second run — while the first run's claim
then commits and wins. Both ran; the first one's result is kept.

The fence: a claim checks, inside its own writer transaction, that its run was not cancelled;
a resumed run asks the writer whether the call was committed meanwhile before it executes.
The writer orders the two, and the cancel happened before the resumed run was started: so
either the first claim committed before that question (the resumed run reuses its result,
never executing) or it is refused.

The first run's claim is held at a gate between its liveness check and its transaction:
threads are ordered with events, never with sleeps.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pykka
import pytest

import agentkeep as ak
from agentkeep.actors import agent_children, tool_runner
from agentkeep.actors.agent_actor import AgentActor
from agentkeep.actors.call_context import CallCommits
from agentkeep.actors.supervisor import Backoff
from agentkeep.errors import ToolCommitError
from agentkeep.providers import script
from agentkeep.types import ToolResultMessage

from .conftest import EchoArgs, World, text_of
from .test_child_supervision import InjectedCrashError, crash_on_next_work

pytestmark = pytest.mark.timeout(60)

TIMEOUT = 10.0
SHORT_GRACE = 0.05  # the crashed agent abandons its stuck run quickly
CRASH = object()  # told to an agent actor: it crashes (the second test)


class Runs:
    """What each run of the ``work`` tool did: run number -> 'won' / 'lost' / 'refused'."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started: list[int] = []
        self.outcome: dict[int, str] = {}
        self.first_claim_reached = threading.Event()  # run 1 is between check and claim
        self.first_claim_released = threading.Event()
        self.first_claim_done = threading.Event()

    def tool(self) -> ak.Tool[Any, Any]:
        @ak.tool(durable=True)
        def work(ctx: ak.ToolContext, args: EchoArgs) -> str:
            """Commit this run's result early."""
            with self.lock:
                number = len(self.started) + 1
                self.started.append(number)
            if number == 2:
                # The resumed run executes: only now let the first run's claim go on, and
                # wait until it is answered (the order the seed's failure had).
                self.first_claim_released.set()
                assert self.first_claim_done.wait(TIMEOUT)
            try:
                won = ctx.commit(f"run {number}")
                self.outcome[number] = "won" if won else "lost"
            except ToolCommitError:
                self.outcome[number] = "refused"
            finally:
                if number == 1:
                    self.first_claim_done.set()
            return "ignored: a committed result wins"

        return work


def hold_the_first_claim(monkeypatch: pytest.MonkeyPatch, runs: Runs) -> None:
    """The first claim any call makes waits at a gate after its liveness check, before its
    transaction is sent to the writer."""
    original = CallCommits.__init__
    held = [False]

    def init(
        self: CallCommits,
        tool: ak.Tool[Any, Any],
        call_id: str,
        cancel: Any,
        claim: Callable[[ToolResultMessage], bool],
    ) -> None:
        def gated(result: ToolResultMessage) -> bool:
            if not held[0]:
                held[0] = True
                runs.first_claim_reached.set()
                assert runs.first_claim_released.wait(TIMEOUT)
            return claim(result)

        original(self, tool, call_id, cancel, gated)

    monkeypatch.setattr(CallCommits, "__init__", init)


def test_a_claim_on_its_way_when_its_run_is_abandoned_never_lets_the_call_run_twice(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agent_children, "CHILD_GRACE_SECONDS", SHORT_GRACE)
    runs = Runs()
    hold_the_first_claim(monkeypatch, runs)
    crash = crash_on_next_work(monkeypatch)
    world.model.add(script.tool_call("work", {}), lambda context: script.text("after"))
    system = world.open(tools=[runs.tool()], restart_backoff=Backoff(initial_seconds=0))
    agent = system.create()
    agent.send(ak.user("go"))
    assert runs.first_claim_reached.wait(TIMEOUT)

    # The agent crashes; its stuck run outlives the grace and is abandoned; the restart
    # finds the call uncommitted and resumes it.
    crash.set()
    agent.steer(ak.user("crash now"))
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    assert runs.first_claim_done.wait(TIMEOUT)

    winners = [number for number, outcome in runs.outcome.items() if outcome == "won"]
    assert len(winners) == 1, runs.outcome
    # X2: no run of the call started after the run whose commit won.
    assert runs.started[-1] == winners[0], (runs.started, runs.outcome)
    results = [m for m in agent.transcript() if isinstance(m, ToolResultMessage)]
    assert [text_of(m) for m in results] == [f"run {winners[0]}"]
    assert system.failure is None


def test_a_claim_that_commits_after_the_reload_read_is_reused_not_run_again(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other order: the first run's claim is inside the writer (past its check there)
    when its run is cut off, and commits only after the restart read the call as
    uncommitted. The resumed run asks the writer first, so it reuses that result."""
    monkeypatch.setattr(agent_children, "CHILD_GRACE_SECONDS", SHORT_GRACE)
    runs = Runs()
    original_claim = tool_runner.claim_result
    held = [False]

    def claim_held_in_the_writer(tx: Any, agent_id: str, internal_id: str, result: Any) -> bool:
        if not held[0]:
            held[0] = True
            runs.first_claim_reached.set()
            assert runs.first_claim_released.wait(TIMEOUT)
        return original_claim(tx, agent_id, internal_id, result)

    monkeypatch.setattr(tool_runner, "claim_result", claim_held_in_the_writer)
    original_load = AgentActor._load

    def load_then_release(self: AgentActor, *, records: bool) -> Any:
        loaded = original_load(self, records=records)
        if runs.first_claim_reached.is_set():
            runs.first_claim_released.set()  # the claim commits after this read
        return loaded

    monkeypatch.setattr(AgentActor, "_load", load_then_release)
    # The writer is held, so nothing that commits can set the crash off: it is told to
    # the agent's actor directly.
    receive = AgentActor._receive

    def crash_when_told(self: AgentActor, message: Any) -> None:
        if message is CRASH:
            raise InjectedCrashError("the agent actor crashed while its run's claim was held")
        receive(self, message)

    monkeypatch.setattr(AgentActor, "_receive", crash_when_told)
    world.model.add(script.tool_call("work", {}), lambda context: script.text("after"))
    system = world.open(tools=[runs.tool()], restart_backoff=Backoff(initial_seconds=0))
    agent = system.create()
    agent.send(ak.user("go"))
    assert runs.first_claim_reached.wait(TIMEOUT)

    (actor,) = pykka.ActorRegistry.get_by_class(AgentActor)
    actor.tell(CRASH)
    assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    assert runs.first_claim_done.wait(TIMEOUT)

    assert runs.started == [1]  # never run again
    assert runs.outcome == {1: "won"}
    results = [m for m in agent.transcript() if isinstance(m, ToolResultMessage)]
    assert [text_of(m) for m in results] == ["run 1"]
    assert system.failure is None
