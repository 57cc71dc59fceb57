"""Cancelling a turn a steer joined cancels the steered input too — it never
runs afterwards as work of no turn — and the turns queued behind it run normally, whichever
way the cancel comes (``Sessions.cancel``, ``AgentSystem.abort`` waiting or not)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import agentkeep as ak
from agentkeep.providers import script

from .conftest import TurnWorld


def _cancel(system: ak.AgentSystem, session_id: str) -> None:
    system.sessions.cancel(session_id, timeout_seconds=10)


def _abort_waiting(system: ak.AgentSystem, session_id: str) -> None:
    system.abort(session_id, wait=True, timeout_seconds=10)


def _abort(system: ak.AgentSystem, session_id: str) -> None:
    system.abort(session_id)


@pytest.mark.parametrize(
    "cancel", [_cancel, _abort_waiting, _abort], ids=["sessions.cancel", "abort-wait", "abort"]
)
def test_a_cancel_takes_back_the_steer_the_turn_joined_and_the_next_turn_runs(
    world: TurnWorld, cancel: Callable[[ak.AgentSystem, str], None]
) -> None:
    world.model.add(script.hang(), script.text("the answer to next"))
    system = world.open()
    session = system.create()
    first = system.sessions.send(session.id, "first")
    assert world.model.wait_for_requests(1, timeout_seconds=10)
    steer = system.sessions.send(session.id, "joined steer", delivery="steer")
    assert steer.turn.id == first.turn.id  # it joined the running turn
    after = system.sessions.send(session.id, "next")

    cancel(system, session.id)

    assert first.wait(timeout_seconds=10).status == "cancelled"
    done = after.wait(timeout_seconds=10)
    assert done.status == "completed"  # not "Cancelled before it started"
    assert done.result == {
        "message": {
            "role": "assistant",
            "parts": [{"type": "text", "text": "the answer to next"}],
        }
    }
    assert system.wait_for_idle(session.id, timeout_seconds=10)
    texts = [str(m) for m in system.transcript(session.id)]
    assert not any("joined steer" in t for t in texts)  # the steer never ran
    assert len(world.model.requests) == 2
    # Nothing of the conversation belongs to no turn: every record's event has its turn.
    orphans = [
        e.type
        for e in system.events(session.id, limit=1000)
        if e.turn_id is None and e.type not in ("settled",)
    ]
    assert orphans == []
    assert system.state(session.id) == "idle"
    assert system.sessions.archive(session.id).status == "archived"


def test_a_cancel_whose_steer_was_the_only_input_left_settles_the_session(
    world: TurnWorld,
) -> None:
    world.model.add(script.hang())
    system = world.open()
    session = system.create()
    first = system.sessions.send(session.id, "first")
    assert world.model.wait_for_requests(1, timeout_seconds=10)
    system.sessions.send(session.id, "joined steer", delivery="steer")
    assert system.sessions.cancel(session.id, timeout_seconds=10).id == first.turn.id
    assert system.wait_for_idle(session.id, timeout_seconds=10)
    assert system.state(session.id) == "idle"  # nothing owed: no run holds the steer
    assert len(world.model.requests) == 1
    assert system.sessions.archive(session.id).status == "archived"
