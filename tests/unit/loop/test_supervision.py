"""Supervision of agent actors (issue 5): a crashed agent is restarted from the store; a
failure storm past the restart intensity stops the system cleanly, durable state intact."""

from __future__ import annotations

from typing import Any

import pytest

import agentkeep as ak
from agentkeep.actors.agent_actor import AgentActor
from agentkeep.actors.supervisor import Backoff, RestartIntensity
from agentkeep.loop.messages import StartTools
from agentkeep.providers import script

from .conftest import EchoArgs, World, roles, text_of


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

    @ak.tool(durable=True)
    def count(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Durable: may run again after a crash."""
        runs.append(args.text)
        return f"counted {args.text}"

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
    assert system.store.read(lambda tx: (tx.read_owed(agent.id), tx.pending_calls(agent.id))) == (
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
