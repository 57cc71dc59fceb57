"""Blackbox regressions of the base runtime, one focused test per item not covered elsewhere.

Already covered by ``tests/unit/loop``:

- tool-lookup failure ⇒ error results, no note, settles; argument/validation errors
  (missing, JSON, schema, blank ⇒ ``{}``); throw doesn't stop batch: covered by
  ``test_tool_batches::test_refused_and_failing_calls_become_error_results_and_the_turn_goes_on``;
- server calls untouched: covered by
  ``test_tool_batches::test_a_server_tool_call_is_kept_with_its_result_and_never_executed``;
- parallel run, pending keys first, ordered results: covered by
  ``test_tool_batches::test_calls_run_in_parallel``,
  ``test_tool_batches::test_the_whole_batch_is_durable_before_any_call_runs`` and
  ``test_tool_batches::test_results_land_in_call_order_although_the_second_call_finishes_first``;
- trailing uncommitted call dispatched: covered by
  ``test_hooks_and_resume::test_a_call_stranded_without_a_batch_entry_is_dispatched_fresh``;
- resume after a committed earlier result / failed result tx ⇒ restart re-runs durable tool:
  covered by ``test_hooks_and_resume::test_a_dispatched_batch_resumes_running_only_durable_tools``;
- restart answers after a failed turn: covered by
  ``test_abort_and_failures::test_a_failed_turn_is_answered_when_the_agent_next_runs``;
- call from an erroring response settled before the note: covered by
  ``test_tool_batches::test_calls_of_a_response_that_did_not_end_for_tools_are_answered_not_run``.

Not covered here: "send resolves while a load is blocked" (no seam to block the per-turn reload;
the nearest, a send resolving while an inference is blocked, is
``tests/chaos/test_core_loop_gaps.py::test_a_send_accepted_mid_inference_costs_two_requests_and_one_turn``);
"tx scoped to its persistence" (agentkeep has one store per system; the seed's multi-persistence
transaction handles have no counterpart).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import agentkeep as ak
from agentkeep.persistence.interface import Transaction
from agentkeep.providers import script
from agentkeep.types import (
    Done,
    StreamEvent,
    TextDelta,
    TextEnd,
    TextStart,
    ToolCallBlock,
    ToolResultMessage,
)
from agentkeep.types.records import BlockRecord, OwedWork, ToolRecord, UserRecord

from .conftest import World, roles, text_of

if TYPE_CHECKING:
    import pytest


class Thrower(ak.Feature):
    name = "thrower"

    def on_event(self, ctx: ak.HookContext, event: StreamEvent) -> None:
        raise RuntimeError("observer broke")


class Recorder(ak.Feature):
    name = "recorder"

    def __init__(self) -> None:
        self.events: list[StreamEvent] = []

    def on_event(self, ctx: ak.HookContext, event: StreamEvent) -> None:
        self.events.append(event)


def test_an_observer_that_throws_does_not_stop_any_event_reaching_the_next(world: World) -> None:
    recorder = Recorder()
    world.model.add(script.text("hello", chunks=3))
    system = world.open(features=[Thrower(), recorder])
    agent = system.create()
    agent.send(ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=10)

    kinds = [type(e) for e in recorder.events]
    assert kinds == [TextStart, TextDelta, TextDelta, TextDelta, TextEnd, Done]
    assert text_of(agent.transcript()[-1]) == "hello"


def test_a_block_less_turn_adds_no_message(world: World) -> None:
    world.model.add(script.events(script.done("normal")))
    system = world.open()
    agent = system.create()
    agent.send(ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=10)

    assert roles(agent.transcript()) == ["user"]
    assert agent.state == "idle"


def test_a_finished_empty_text_block_is_persisted(world: World) -> None:
    world.model.add(script.events(TextStart(), TextEnd(text=""), script.done("normal")))
    system = world.open()
    agent = system.create()
    agent.send(ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=10)

    transcript = agent.transcript()
    assert roles(transcript) == ["user", "assistant"]
    assert isinstance(transcript[1], ak.AssistantMessage)
    assert transcript[1].content == (ak.TextBlock(text=""),)


def test_every_request_replays_the_full_context(world: World) -> None:
    world.model.add(script.text("a1"), script.tool_call("echo", {"text": "x"}), script.text("a2"))
    system = world.open()
    agent = system.create()
    agent.send(ak.user("q1"))
    assert agent.wait_for_idle(timeout_seconds=10)
    agent.send(ak.user("q2"))
    assert agent.wait_for_idle(timeout_seconds=10)

    last = list(world.model.requests[-1].context.messages)
    assert roles(last) == ["user", "assistant", "user", "assistant", "tool"]
    assert last == agent.transcript()[:-1]


def test_the_blocks_of_one_response_rebuild_one_message(world: World) -> None:
    world.model.add(
        script.tool_calls(
            script.call("echo", {"text": "a"}, call_id="c1"),
            script.call("echo", {"text": "b"}, call_id="c2"),
            text="thinking aloud",
        ),
        script.text("done"),
    )
    system = world.open()
    agent = system.create()
    agent.send(ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=10)

    transcript = agent.transcript()
    assert roles(transcript) == ["user", "assistant", "tool", "tool", "assistant"]
    first = transcript[1]
    assert isinstance(first, ak.AssistantMessage)
    assert [type(b) for b in first.content] == [ak.TextBlock, ToolCallBlock, ToolCallBlock]
    assert roles(list(world.model.requests[1].context.messages)) == roles(transcript[:4])


def test_queue_entries_of_an_earlier_process_join_new_ones_in_key_order(world: World) -> None:
    world.model.add(*(script.text(f"a{n}") for n in range(1, 5)))
    first = world.open(resume=False)
    agent = first.create(id="queued")
    for n in (1, 2):
        first.internals.accept(agent.id, "send", ak.user(f"old{n}"), id=f"old{n}", start=False)
    first.close()

    second = world.open(resume=False)
    for n in (1, 2):
        second.internals.accept(agent.id, "send", ak.user(f"new{n}"), id=f"new{n}", start=False)
    second.start()
    assert second.wait_for_idle(agent.id, timeout_seconds=10)

    users = [text_of(m) for m in second.transcript(agent.id) if roles([m]) == ["user"]]
    assert users == ["old1", "old2", "new1", "new2"]


def _stuck_at(seconds: float) -> Callable[[], float]:
    """An injected clock (``open(now=)``) that never moves: every write of that system is
    stamped with the same millisecond."""
    return lambda: seconds


def test_writes_of_sequential_processes_in_one_millisecond_keep_their_order(
    world: World,
) -> None:
    """Sequential systems on one store accept messages in the same millisecond, with the wall
    clock stepping back between them; queue order is the durable key, not the time."""
    world.model.add(*(script.text(f"a{n}") for n in range(1, 7)))
    ids: list[str] = []
    for generation in range(3):
        # Each process's clock is stuck, and a step behind the previous one's.
        system = world.open(resume=False, now=_stuck_at(1_800_000_000.0 - generation * 0.5))
        if generation == 0:
            system.create(id="samems")
        for n in range(2):
            ids.append(f"g{generation}m{n}")
            system.internals.accept("samems", "send", ak.user(ids[-1]), id=ids[-1], start=False)
        system.close()
    stamps = [
        q.accepted_at_ms
        for q in world.open(resume=False).internals.store.read(
            lambda tx: tx.queue.messages("samems")
        )
    ]
    world.systems.pop().close()
    assert stamps[0] == stamps[1] > stamps[2] == stamps[3] > stamps[4] == stamps[5], stamps

    system = world.open()
    assert system.wait_for_idle("samems", timeout_seconds=10)
    users = [text_of(m) for m in system.transcript("samems") if roles([m]) == ["user"]]
    assert users == ids


def test_an_empty_tool_call_batch_asks_for_no_extra_inference(world: World) -> None:
    world.model.add(script.events(script.done("tool_call")), script.text("never asked"))
    system = world.open()
    agent = system.create()
    agent.send(ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=10)

    assert len(world.model.requests) == 1
    assert roles(agent.transcript()) == ["user"]
    assert agent.state == "idle"


def test_start_answers_a_trailing_tool_result(world: World) -> None:
    call = ToolCallBlock(call_id="c1", name="echo", arguments='{"text": "x"}')

    def write(tx: Transaction) -> None:
        tx.records.append("trailing", UserRecord(message_id="m1", message=ak.user("go")))
        tx.records.append("trailing", BlockRecord(block=call))
        result = ToolResultMessage(call_id="c1", content=(ak.TextBlock(text="echo x"),))
        tx.records.append("trailing", ToolRecord(message=result))
        tx.facts.write_owed("trailing", OwedWork(stage="inference"))

    system = world.open()
    system.create(id="trailing")
    system.internals.store.transact(write)
    system.close()
    world.model.add(script.text("answered"))
    system = world.open()
    assert system.wait_for_idle("trailing", timeout_seconds=10)

    assert world.tool_runs == []
    assert roles(list(world.model.requests[0].context.messages)) == ["user", "assistant", "tool"]
    assert text_of(system.transcript("trailing")[-1]) == "answered"


def test_close_after_idle_destroys_each_session_exactly_once(world: World) -> None:
    world.model.add(script.text("a1"), script.text("b1"))
    system = world.open()
    one, two = system.create(), system.create()
    one.send(ak.user("q"))
    two.send(ak.user("q"))
    assert one.wait_for_idle(timeout_seconds=10)
    assert two.wait_for_idle(timeout_seconds=10)
    assert world.model.closed_model_sessions == ()  # idle is not closed: the session is kept

    system.close(timeout_seconds=10)
    system.close(timeout_seconds=10)  # idempotent: nothing destroyed twice

    opened = sorted(s.agent_id for s in world.model.model_sessions)
    assert len(opened) == 2
    assert sorted(world.model.closed_model_sessions) == opened


class Extra(ak.Feature):
    name = "extra"

    def instructions(self, ctx: ak.HookContext) -> str | None:
        return "feature rules"


def test_the_session_is_created_with_instructions_and_tools_and_settings_go_per_request(
    world: World,
) -> None:
    world.model.add(script.text("a1"), script.text("a2"))
    system = world.open(instructions="base rules", features=[Extra()])
    agent = system.create()
    agent.send(ak.user("q1"))
    assert agent.wait_for_idle(timeout_seconds=10)
    agent.send(ak.user("q2"), effort="high")
    assert agent.wait_for_idle(timeout_seconds=10)

    (session,) = world.model.model_sessions
    assert session.options.instructions == "base rules\n\nfeature rules"
    assert sorted(t.name for t in session.options.tools) == ["boom", "echo", "wait"]
    selections = [(r.selection.model, r.selection.effort) for r in world.model.requests]
    assert selections == [("gym-1", None), ("gym-1", "high")]


def test_a_hanging_tool_is_abandoned_on_close_and_answered_once_after_restart(
    world: World,
) -> None:
    """agentkeep's reading of "hanging tool abandoned on close": close waits up to its timeout,
    cancels the call, destroys the session once and releases the store; the call stays pending
    (owed), and the next owner answers it once without re-running the non-durable tool. The
    abandoned call's late result can never land: its owner's store is closed."""
    world.model.add(script.tool_call("wait", {"text": "g"}, call_id="c1"), script.text("after"))
    first = world.open()
    agent = first.create(id="hanging")
    agent.send(ak.user("go"))
    assert world.gate("g").entered.wait(10)

    first.close(timeout_seconds=0.2)
    (session,) = world.model.model_sessions
    assert world.model.closed_model_sessions == (session.agent_id,)
    world.gate("g").release.set()  # the abandoned tool returns into a closed store

    second = world.open()
    assert second.wait_for_idle("hanging", timeout_seconds=10)
    transcript = second.transcript("hanging")
    assert roles(transcript) == ["user", "assistant", "tool", "assistant"]
    assert text_of(transcript[2]) == (
        "The tool call was interrupted by a restart and was not retried."
    )
    assert text_of(transcript[3]) == "after"
    assert world.tool_runs == ["wait:g"]
    assert second.internals.store.read(lambda tx: tx.calls.pending("hanging")) == []


def test_one_failed_queue_delete_rolls_back_the_whole_consumption(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentkeep.persistence.queue_statements import QueueStatements

    original = QueueStatements.dequeue
    failures = [RuntimeError("the delete failed")]

    def dequeue(self: QueueStatements, *args: Any, **kwargs: Any) -> bool:
        if failures:
            raise failures.pop()
        return original(self, *args, **kwargs)

    monkeypatch.setattr(QueueStatements, "dequeue", dequeue)
    world.model.add(script.text("about the failure"), script.text("a1"))
    system = world.open()
    agent = system.create(id="rollback")
    agent.send(ak.user("m1"), id="m1")
    assert agent.wait_for_idle(timeout_seconds=10)

    # Nothing of the consumption landed: the entry is still queued, no user record, owed.
    assert roles(agent.transcript()) == ["system"]
    assert [q.id for q in system.internals.store.read(lambda tx: tx.queue.messages(agent.id))] == [
        "m1"
    ]
    assert agent.state == "owes_work"
    assert world.model.requests == ()

    assert system.start() == ["rollback"]
    assert agent.wait_for_idle(timeout_seconds=10)
    # The failure note is owed an answer first (sends wait until nothing is owed), then m1.
    assert roles(agent.transcript()) == ["system", "assistant", "user", "assistant"]
    assert text_of(agent.transcript()[2]) == "m1"
    assert system.internals.store.read(
        lambda tx: (tx.queue.messages(agent.id), tx.facts.read_owed(agent.id))
    ) == (
        [],
        None,
    )
