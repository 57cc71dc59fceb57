"""A failed turn never strands its session. The work the runtime still
owes is shown on the session (``owes``, with its reason), every refusal names the state and
the way out, and ``Sessions.settle`` ends the owed work durably — a note answers the owed
question — after which the session is idle, archivable, and takes new turns."""

from __future__ import annotations

import pytest

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.sessions import SessionBusyError, TurnRecord

from .conftest import TurnWorld


def _failed_session(world: TurnWorld) -> tuple[ak.AgentSystem, str, TurnRecord]:
    world.model.add(script.error("internal_error", "the vendor is down"))
    system = world.open()
    session = system.create()
    failed = system.sessions.send(session.id, "q").wait(timeout_seconds=10)
    assert failed.status == "failed"
    assert system.wait_for_idle(session.id, timeout_seconds=10)
    return system, session.id, failed


def test_a_failed_turn_shows_its_owed_work_and_every_refusal_names_the_way_out(
    world: TurnWorld,
) -> None:
    system, session_id, failed = _failed_session(world)
    assert system.state(session_id) == "owes_work"
    owes = system.sessions.get(session_id).owes
    assert owes is not None
    assert (owes.stage, owes.turn_id) == ("inference", failed.id)
    assert "turn 1 failed (the vendor is down)" in owes.reason
    assert system.sessions.list()[0].owes == owes
    way_out = f"agentkeep session settle {session_id}"
    with pytest.raises(SessionBusyError, match="owes work no turn holds") as busy:
        system.sessions.archive(session_id)
    assert way_out in str(busy.value)
    assert f"POST /v1/sessions/{session_id}/settle" in str(busy.value)
    with pytest.raises(ak.TurnStateError, match="no live turn to cancel, but it owes") as none:
        system.sessions.cancel(session_id)
    assert way_out in str(none.value)


def test_settle_ends_the_owed_work_with_a_note_and_the_session_goes_on(
    world: TurnWorld,
) -> None:
    system, session_id, failed = _failed_session(world)
    settled = system.sessions.settle(session_id, note="nobody needs this answer")
    assert settled.owes is None
    assert system.state(session_id) == "idle"
    last = system.transcript(session_id)[-1]
    assert isinstance(last, ak.SystemMessage)
    assert "ended: nobody needs this answer" in str(last)
    assert system.sessions.turn(session_id, failed.id) == failed  # a terminal turn stays
    assert system.sessions.settle(session_id) == settled  # nothing owed: unchanged
    kinds = [e.type for e in system.events(session_id, limit=1000)][-2:]
    assert kinds == ["message", "settled"]

    # The session goes on: the next turn runs, and the settled question is not asked again.
    world.model.add(script.text("fresh answer"))
    done = system.sessions.send(session_id, "again").wait(timeout_seconds=10)
    assert done.status == "completed"
    assert len(world.model.requests) == 2
    assert system.wait_for_idle(session_id, timeout_seconds=10)
    assert system.sessions.archive(session_id).status == "archived"


def test_settled_work_is_not_resumed_by_a_restart(world: TurnWorld) -> None:
    system, session_id, _ = _failed_session(world)
    system.close()
    # A restart resumes the owed question (no turn holds it) and fails again: still owed.
    world.model.add(script.error("internal_error", "still down"))
    system = world.open()
    assert world.model.wait_for_requests(2, timeout_seconds=10)
    assert system.wait_for_idle(session_id, timeout_seconds=10)
    owes = system.sessions.get(session_id).owes
    assert owes is not None
    system.sessions.settle(session_id)
    system.close()
    system = world.open()  # nothing owed: nothing resumed
    assert system.wait_for_idle(session_id, timeout_seconds=10)
    assert len(world.model.requests) == 2
    assert system.state(session_id) == "idle"
    assert system.sessions.archive(session_id).status == "archived"


def test_settle_refuses_a_live_turn_and_names_the_cancel(world: TurnWorld) -> None:
    world.model.add(script.hang())
    system = world.open()
    session = system.create()
    sent = system.sessions.send(session.id, "hang")
    assert world.model.wait_for_requests(1, timeout_seconds=10)
    assert system.sessions.get(session.id).owes is None  # a live turn holds the work
    with pytest.raises(SessionBusyError, match="turn 1 is running") as busy:
        system.sessions.settle(session.id)
    assert f"agentkeep session cancel {session.id}" in str(busy.value)
    with pytest.raises(SessionBusyError, match="cannot be archived now: turn 1 is running"):
        system.sessions.archive(session.id)
    system.sessions.cancel(session.id, timeout_seconds=10)
    assert sent.wait(timeout_seconds=10).status == "cancelled"


def test_cancelling_a_queued_turn_nothing_ran_leaves_nothing_owed(world: TurnWorld) -> None:
    """The acceptance of a turn that is cancelled before anything ran it (``start=False``, as
    a direct `agentkeep send` accepts) made work owed that no turn holds any more: it is
    settled with the cancel, so the session does not strand."""
    system = world.open()
    session = system.create()
    sent = system.sessions.send(session.id, "later", start=False)
    assert system.sessions.cancel(session.id).id == sent.turn.id
    assert system.state(session.id) == "idle"
    assert system.sessions.get(session.id).owes is None
    assert len(world.model.requests) == 0  # nothing was asked
    assert system.sessions.archive(session.id).status == "archived"


def test_cancelling_a_terminal_turn_again_never_asks_the_owed_question_again(
    world: TurnWorld,
) -> None:
    system, session_id, failed = _failed_session(world)
    assert system.sessions.cancel(session_id, failed.id) == failed  # terminal: unchanged
    assert system.wait_for_idle(session_id, timeout_seconds=10)
    assert len(world.model.requests) == 1  # nothing woke the agent to ask again
    assert system.sessions.get(session_id).owes is not None
