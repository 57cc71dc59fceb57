"""Supervision of agent actors: a crashed agent is restarted from the store; a
failure storm past the restart intensity stops the system cleanly, durable state intact."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import agentkeep as ak
from agentkeep.actors.agent_actor import AgentActor
from agentkeep.actors.supervisor import Backoff, RestartIntensity
from agentkeep.loop.effects import StartTools
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.store import Store
from agentkeep.persistence.writer import StoreWriter
from agentkeep.providers import script

from .conftest import EchoArgs, World, counting_tool, roles, text_of


class InjectedCrashError(RuntimeError):
    """Raised inside the agent actor on purpose."""


def crash_when_tools_start(monkeypatch: pytest.MonkeyPatch, times: int) -> list[int]:
    """Make the agent actor itself crash (not a tool) when it is told to start a batch."""
    crashes: list[int] = []
    original = AgentActor._carry_out

    def carry_out(self: AgentActor, effect: Any) -> Any:
        if isinstance(effect, StartTools) and len(crashes) < times:
            crashes.append(1)
            raise InjectedCrashError("the agent actor crashed mid-turn")
        return original(self, effect)

    monkeypatch.setattr(AgentActor, "_carry_out", carry_out)
    return crashes


def test_a_crashed_agent_actor_is_restarted_and_finishes_the_turn(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[str] = []

    count = counting_tool(runs)

    crashes = crash_when_tools_start(monkeypatch, times=1)
    world.model.add(script.tool_call("count", {"text": "x"}), script.text("done"))
    system = world.open(tools=[count], restart_backoff=Backoff(initial_seconds=0))
    agent = system.create()
    agent.send(ak.user("go"))

    assert agent.wait_for_idle(timeout_seconds=20)
    assert crashes == [1]
    transcript = agent.transcript()
    assert roles(transcript) == ["user", "assistant", "tool", "assistant"]
    assert text_of(transcript[-1]) == "done"
    assert runs == ["x"]  # the crash came before the call ran: it ran exactly once
    assert system.failure is None
    assert system.internals.store.read(
        lambda tx: (tx.facts.read_owed(agent.id), tx.calls.pending(agent.id))
    ) == (
        None,
        [],
    )


def test_a_failure_storm_past_the_intensity_stops_the_system_cleanly(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    crash_when_tools_start(monkeypatch, times=100)
    world.model.add(script.tool_call("echo", {"text": "x"}))
    system = world.open(
        restart_intensity=RestartIntensity(max_restarts=2, period_seconds=60),
        restart_backoff=Backoff(initial_seconds=0),
    )
    agent = system.create()
    agent.send(ak.user("go"))

    error = system.wait_for_failure(timeout_seconds=30)

    assert error is not None
    assert "agents" in str(error)
    with pytest.raises(ak.AgentClosedError):
        agent.send(ak.user("after the storm"))
    # The lock is released and the durable state is intact: the batch is still owed.
    world.model.add(script.text("recovered"))
    monkeypatch.undo()
    reopened = world.open()
    reopened.wait_for_idle(agent.id, timeout_seconds=20)
    transcript = reopened.transcript(agent.id)
    assert text_of(transcript[-1]) == "recovered"
    # The batch was durable before the crashes; the non-durable call is answered, never run.
    assert (
        text_of(transcript[2]) == "The tool call was interrupted by a restart and was not retried."
    )
    assert world.tool_runs == []


# -- the system supervisor: a store writer failure restarts the agents after it ------------


class WriterFailures:
    """Make the store writer itself fail (a bug outside any one transaction) on demand, and
    count the writer and agent actor incarnations."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.armed = 0  # how many of the next groups fail
        self.failures = 0
        self.writers_started = 0
        self.agent_actors_started = 0
        self._changed = threading.Condition()
        original_group = StoreWriter._run_group
        original_agent_init = AgentActor.__init__
        failures = self

        def run_group(writer: StoreWriter, pending: Any) -> None:
            if failures.armed > 0:
                failures.armed -= 1
                failures.failures += 1
                raise InjectedWriterBugError("the store writer broke")
            original_group(writer, pending)

        def counted(original_start_writer: Any) -> Any:
            def start_writer(store: Store) -> Any:
                ref = original_start_writer(store)
                with failures._changed:
                    failures.writers_started += 1
                    failures._changed.notify_all()
                return ref

            return start_writer

        def agent_init(actor: AgentActor, *args: Any, **kwargs: Any) -> None:
            original_agent_init(actor, *args, **kwargs)
            with failures._changed:
                failures.agent_actors_started += 1
                failures._changed.notify_all()

        monkeypatch.setattr(StoreWriter, "_run_group", run_group)
        # One store class starts the writer on every database (PostgreSQL's on the owner's
        # session, through its Database part).
        monkeypatch.setattr(Store, "start_writer", counted(Store.start_writer))
        monkeypatch.setattr(AgentActor, "__init__", agent_init)

    def wait_for_writers(self, count: int) -> None:
        """Until the ``count``-th writer has started and admits work."""
        with self._changed:
            assert self._changed.wait_for(lambda: self.writers_started >= count, 20)

    def wait_for_agent_actors(self, count: int) -> None:
        """Until the ``count``-th agent actor exists (a restarted tier's actor is counted
        as owing its Start before it is built, so a later wait_for_idle waits for it)."""
        with self._changed:
            assert self._changed.wait_for(lambda: self.agent_actors_started >= count, 20)


class InjectedWriterBugError(RuntimeError):
    """Raised inside the store writer's actor on purpose."""


INTERRUPTED = "The tool call was interrupted by a restart and was not retried."


def probe(tx: Transaction) -> None:
    tx.kv.read("probe")


def test_a_writer_failure_restarts_the_writer_and_the_agents_after_it(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    failures = WriterFailures(monkeypatch)
    world.model.add(script.tool_call("wait", {"text": "g"}), script.text("done"))
    system = world.open(restart_backoff=Backoff(initial_seconds=0))
    agent = system.create()
    agent.send(ak.user("go"))
    gate = world.gate("g")
    assert gate.entered.wait(20)  # the batch is durable and its tool runs
    assert (failures.writers_started, failures.agent_actors_started) == (1, 1)

    failures.armed = 1
    with pytest.raises(ak.CommitOutcomeUnknownError):
        system.internals.store.transact(probe)  # its group kills the writer

    # The agent tier restarts after the writer; the agent resumes from the store.
    assert agent.wait_for_idle(timeout_seconds=20)
    gate.release.set()  # the old incarnation's tool finishes into the void
    transcript = agent.transcript()
    assert roles(transcript) == ["user", "assistant", "tool", "assistant"]
    assert text_of(transcript[2]) == INTERRUPTED  # not durable: answered, never re-run
    assert text_of(transcript[-1]) == "done"
    assert world.tool_runs == ["wait:g"]
    assert (failures.failures, failures.writers_started, failures.agent_actors_started) == (
        1,
        2,
        2,
    )
    assert system.failure is None
    # The new writer takes work as before.
    world.model.add(script.text("still here"))
    agent.send(ak.user("again"))
    assert agent.wait_for_idle(timeout_seconds=20)
    assert text_of(agent.transcript()[-1]) == "still here"


def test_a_writer_failure_inside_an_agents_own_commit_loses_and_repeats_nothing(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    failures = WriterFailures(monkeypatch)
    runs: list[str] = []

    @ak.tool
    def record(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Records its run, then breaks the writer under the commit of its own result."""
        runs.append(args.text)
        failures.armed = 1
        return f"recorded {args.text}"

    world.model.add(script.tool_call("record", {"text": "x"}), script.text("done"))
    system = world.open(tools=[record], restart_backoff=Backoff(initial_seconds=0))
    agent = system.create()
    agent.send(ak.user("go"))

    # The failed commit ends the old incarnation's run (idle, still owing); the restarted
    # tier's actor picks the turn up.
    failures.wait_for_agent_actors(2)
    assert agent.wait_for_idle(timeout_seconds=20)
    assert failures.failures == 1
    assert (failures.writers_started, failures.agent_actors_started) == (2, 2)
    transcript = agent.transcript()
    assert roles(transcript) == ["user", "assistant", "tool", "assistant"]
    # The result's commit died with the writer, so the restart finds the call unanswered;
    # not durable, it is answered and never run twice.
    assert text_of(transcript[2]) == INTERRUPTED
    assert text_of(transcript[-1]) == "done"
    assert runs == ["x"]
    assert system.failure is None
    assert system.internals.store.read(
        lambda tx: (tx.facts.read_owed(agent.id), tx.calls.pending(agent.id))
    ) == (
        None,
        [],
    )


def test_a_writer_failure_storm_stops_the_system_with_durable_state_intact(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    failures = WriterFailures(monkeypatch)
    system = world.open(
        restart_intensity=RestartIntensity(max_restarts=1, period_seconds=60),
        restart_backoff=Backoff(initial_seconds=0),
    )
    agent = system.create()
    system.internals.accept(agent.id, "send", ak.user("queued"), start=False)

    failures.armed = 100
    with pytest.raises(ak.CommitOutcomeUnknownError):
        system.internals.store.transact(probe)  # failure 1: restarted
    failures.wait_for_writers(2)
    with pytest.raises(ak.CommitOutcomeUnknownError):
        system.internals.store.transact(probe)  # failure 2: past the intensity
    error = system.wait_for_failure(timeout_seconds=20)

    assert error is not None
    assert "store_writer" in str(error)
    assert failures.writers_started == 2
    with pytest.raises(ak.AgentClosedError):
        agent.send(ak.user("after the storm"))
    monkeypatch.undo()
    world.model.add(script.text("answered"))
    reopened = world.open()  # the lock was released; the queued message is still owed
    assert reopened.wait_for_idle(agent.id, timeout_seconds=20)
    transcript = reopened.transcript(agent.id)
    assert roles(transcript) == ["user", "assistant"]
    assert text_of(transcript[-1]) == "answered"


def test_a_send_during_a_restart_backoff_is_held_for_the_restarted_actor(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    crashed = threading.Event()
    original = AgentActor._carry_out

    def carry_out(self: AgentActor, effect: Any) -> Any:
        if isinstance(effect, StartTools) and not crashed.is_set():
            crashed.set()
            raise InjectedCrashError("the agent actor crashed mid-turn")
        return original(self, effect)

    monkeypatch.setattr(AgentActor, "_carry_out", carry_out)
    world.model.add(
        script.tool_call("echo", {"text": "x"}), script.text("first"), script.text("second")
    )
    # A long backoff: the second send lands while the crashed actor waits for its restart.
    system = world.open(restart_backoff=Backoff(initial_seconds=1.0))
    agent = system.create()
    agent.send(ak.user("go"))
    assert crashed.wait(20)

    delivery = agent.send(ak.user("while it restarts"))  # accepted: never a supervisor error

    assert delivery.created
    assert agent.wait_for_idle(timeout_seconds=20)
    transcript = agent.transcript()
    assert [text_of(m) for m in transcript if roles([m]) == ["user"]] == [
        "go",
        "while it restarts",
    ]
    assert text_of(transcript[-1]) in {"first", "second"}
    assert system.internals.store.read(lambda tx: tx.facts.read_owed(agent.id)) is None
