"""Abort and failures (seed README: abort owns the whole turn; failures leave a note)."""

from __future__ import annotations

import threading

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.types import Done, StreamEvent, TextStart, ToolResultMessage

from .conftest import World, roles, text_of


class EventLog(ak.Feature):
    name = "event-log"

    def __init__(self) -> None:
        self.events: list[StreamEvent] = []
        self.first_event = threading.Event()

    def on_event(self, ctx: ak.HookContext, event: StreamEvent) -> None:
        self.events.append(event)
        self.first_event.set()

    def dones(self) -> list[Done]:
        return [e for e in self.events if isinstance(e, Done)]


def test_abort_mid_stream_keeps_finished_blocks_drops_the_open_one_and_ends_once(
    world: World,
) -> None:
    log = EventLog()
    world.model.add(script.hang(before=[*script.text("kept").steps[:-1], TextStart()]))
    system = world.open(features=[log])
    agent = system.create()
    agent.send(ak.user("go"))
    assert world.model.wait_for_requests(1, timeout_seconds=10)
    assert log.first_event.wait(10)

    agent.abort(wait=True, timeout_seconds=10)

    assert [d.state for d in log.dones()] == ["cancelled"]
    assert [text_of(m) for m in agent.transcript()] == ["go", "kept"]
    assert agent.state == "idle"


def test_abort_during_a_tool_answers_it_aborted_without_waiting_and_the_queue_runs_after(
    world: World,
) -> None:
    world.model.add(script.tool_call("wait", {"text": "g"}, call_id="c"), script.text("later"))
    system = world.open()
    agent = system.create()
    agent.send(ak.user("go"))
    assert world.gate("g").entered.wait(10)
    agent.send(ak.user("queued"))

    agent.abort(wait=True, timeout_seconds=10)  # returns although the tool still runs

    transcript = agent.transcript()
    (result,) = [m for m in transcript if isinstance(m, ToolResultMessage)]
    assert result.is_error
    assert text_of(result) == "The tool call was aborted."
    # The queue was kept, and the turn queued behind the aborted one runs now
    # (docs/decisions.md), while the abandoned tool still runs on.
    agent.wait_for_idle(timeout_seconds=10)
    assert text_of(agent.transcript()[-1]) == "later"
    assert agent.state == "idle"
    world.gate("g").release.set()


def test_an_unrecovered_provider_error_leaves_a_failure_note(world: World) -> None:
    world.model.add(script.error("overloaded", "The server is overloaded."))
    system = world.open()
    agent = system.create()
    agent.send(ak.user("go"))
    agent.wait_for_idle(timeout_seconds=10)

    transcript = agent.transcript()
    assert roles(transcript) == ["user", "system"]
    assert text_of(transcript[-1]) == "The last turn failed: The server is overloaded."
    assert agent.state == "owes_work"  # the note is owed an answer by the next start


def test_an_error_followed_by_a_success_in_the_same_turn_leaves_no_trace(world: World) -> None:
    world.model.add(
        script.tool_call("wait", {"text": "g"}),
        script.error("overloaded"),
        script.text("recovered"),
    )
    system = world.open()
    agent = system.create()
    agent.send(ak.user("go"))
    assert world.gate("g").entered.wait(10)
    agent.steer(ak.user("more"))
    agent.steer(ak.user("and more"))  # drains into a fresh inference after the error
    world.gate("g").release.set()
    agent.wait_for_idle(timeout_seconds=10)

    transcript = agent.transcript()
    assert "system" not in roles(transcript)
    assert text_of(transcript[-1]) == "recovered"


def test_a_persistently_failing_provider_cannot_loop(world: World) -> None:
    world.model.add(*(script.error("overloaded") for _ in range(3)))
    system = world.open()
    agent = system.create()
    # Both queued before the loop starts (sent one by one, a loaded machine could run the
    # first before the second is accepted, which asks the model once more).
    system.internals.accept(agent.id, "send", ak.user("one"), start=False)
    system.internals.accept(agent.id, "send", ak.user("two"), start=False)
    system.internals.wake(agent.id)
    agent.wait_for_idle(timeout_seconds=10)

    # Each drain consumed from a finite queue; one note for the failed turn.
    assert len(world.model.requests) == 2
    assert roles(agent.transcript()) == ["user", "user", "system"]


def test_a_failed_turn_is_answered_when_the_agent_next_runs(world: World) -> None:
    world.model.add(
        script.error("internal_error", "boom"), script.text("sorry"), script.text("again ok")
    )
    system = world.open()
    agent = system.create()
    agent.send(ak.user("go"))
    agent.wait_for_idle(timeout_seconds=10)
    system.close()

    system = world.open()
    system.resolve(agent.id).send(ak.user("again"))
    system.wait_for_idle(agent.id, timeout_seconds=10)
    # The note is owed an answer first (it has the failure for context), then the send.
    resumed, then = (r.context.messages for r in world.model.requests[1:])
    assert text_of(resumed[-1]) == "The last turn failed: boom"
    assert text_of(then[-1]) == "again"
    assert text_of(system.transcript(agent.id)[-1]) == "again ok"


def test_a_stream_that_ends_without_done_or_raises_is_a_failed_response(world: World) -> None:
    world.model.add(script.without_done(), script.raises(RuntimeError("wire broke")))
    system = world.open()
    first, second = system.create(), system.create()
    first.send(ak.user("one"))
    assert first.wait_for_idle(timeout_seconds=10)
    second.send(ak.user("two"))
    assert second.wait_for_idle(timeout_seconds=10)

    first_note, second_note = (text_of(a.transcript()[-1]) for a in (first, second))
    assert first_note == "The last turn failed: The response ended without a terminal event."
    assert second_note.startswith("The last turn failed: ")
    assert "wire broke" in second_note


def test_block_reset_discards_the_attempt_it_took_back(world: World) -> None:
    world.model.add(script.retry_then(script.text("final"), attempts=2, partial="draft"))
    system = world.open()
    agent = system.create()
    agent.send(ak.user("go"))
    agent.wait_for_idle(timeout_seconds=10)

    assert [text_of(m) for m in agent.transcript()] == ["go", "final"]


def test_a_later_run_of_the_same_instance_answers_a_failure_note_instead_of_settling(
    world: World,
) -> None:
    """Regression (flaky_store seed 3796): after a failure note, a new run of the same live
    instance (a late wake-up, a start) found its once-per-instance tail check spent, found
    nothing queued, and settled over the unanswered note."""
    world.model.add(script.error("internal_error", "boom"), script.text("about the failure"))
    system = world.open()
    agent = system.create()
    agent.send(ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=10)
    assert agent.state == "owes_work"

    assert system.start() == [agent.id]  # the same live instance runs again
    assert agent.wait_for_idle(timeout_seconds=10)

    assert text_of(agent.transcript()[-1]) == "about the failure"
    assert agent.state == "idle"
