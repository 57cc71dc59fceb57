"""An agent's streams run on one long-lived inference worker: no thread is started
per response, and a stream that fails in any way is answered for without ending the worker."""

from __future__ import annotations

import threading

import pytest
from tests.unit.loop.conftest import World

import agentkeep as ak
from agentkeep.providers import script

from .conftest import text_of


def test_steps_start_no_thread_per_response(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    world.model.add(*(script.text(f"answer {n}") for n in range(7)))
    system = world.open(idle_grace_seconds=3600.0)
    agent = system.create()
    for warm_up in ("one", "two"):  # the actor, its worker, then (after the first settled,
        agent.send(ak.user(warm_up))  # before the actor took the second) the sweeper
        assert agent.wait_for_idle(timeout_seconds=10)
    started: list[str] = []
    start = threading.Thread.start

    def counted(thread: threading.Thread) -> None:
        started.append(thread.name)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", counted)
    for n in range(5):
        agent.send(ak.user(f"step {n}"))
        assert agent.wait_for_idle(timeout_seconds=10)
    # The passivation sweeper is the system's one timer thread, not a response's: it exits
    # when no deadline is pending and starts again at the next (after a step slower than
    # its tick, as on a loaded machine), so it is not counted here.
    assert [name for name in started if name != "agentkeep-passivation"] == []
    assert text_of(agent.transcript()[-1]) == "answer 6"


def test_a_stream_that_raises_past_exception_is_a_failed_response_and_the_next_one_runs(
    world: World,
) -> None:
    # SystemExit escapes the stream's own handling (it catches Exception): the job reports
    # it as its exit failure, the agent answers for the response (a failed turn), and the
    # same worker runs the next responses.
    world.model.add(script.raises(SystemExit(3)), script.text("recovered"), script.text("two"))
    system = world.open()
    agent = system.create()
    agent.send(ak.user("one"))
    assert agent.wait_for_idle(timeout_seconds=10)
    assert text_of(agent.transcript()[-1]).startswith("The last turn failed")
    agent.send(ak.user("two"))
    assert agent.wait_for_idle(timeout_seconds=10)
    assert text_of(agent.transcript()[-1]) == "two"
    assert len(world.model.requests) == 3
