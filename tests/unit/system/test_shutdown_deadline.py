"""``shutdown`` bounds its wait for in-flight work with one deadline for all agents: a stream
that never ends no longer holds it for 30 s per agent (SEED-COVERAGE B17, P30), and the work
it cut off stays owed for the next open."""

from __future__ import annotations

import time
from pathlib import Path

import agentkeep as ak
from agentkeep.providers import script


def open_system(home: Path, model: ak.ScriptedModel) -> ak.AgentSystem:
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    return ak.AgentSystem.open(home, providers=providers, provider="local", model="gym-1")


def test_shutdown_stops_streams_that_never_end_at_one_shared_deadline(tmp_path: Path) -> None:
    home = tmp_path / "state"
    model = ak.ScriptedModel()
    model.add(script.hang(), script.hang())
    system = open_system(home, model)
    agents = [system.create(), system.create()]
    for agent in agents:
        agent.send(ak.user(f"question for {agent.id}"))
    assert model.wait_for_requests(2, timeout_seconds=10)  # both streams are in flight

    started = time.monotonic()
    system.shutdown(timeout_seconds=1.0)
    took = time.monotonic() - started

    assert took < 10.0  # one 1 s deadline for both, then the hanging streams are cancelled
    assert system.wait_for_shutdown(timeout_seconds=0)

    # The cut-off questions stay owed: the next open answers each of them.
    again = ak.ScriptedModel()
    again.add(script.text("answer"), script.text("answer"))
    reopened = open_system(home, again)
    try:
        for agent in agents:
            assert reopened.wait_for_idle(agent.id, timeout_seconds=10)
            assert isinstance(reopened.transcript(agent.id)[-1], ak.AssistantMessage)
        assert len(again.requests) == 2
    finally:
        reopened.close(timeout_seconds=10)
