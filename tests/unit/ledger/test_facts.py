"""Every fact the runtime commits has its ledger event, dense and in order."""

from __future__ import annotations

import pytest

import agentkeep as ak
from agentkeep.errors import StoreConstraintError
from agentkeep.providers import script

from .conftest import LedgerWorld, all_events, types_of


def test_a_turn_with_a_tool_call_reports_every_fact_in_order(world: LedgerWorld) -> None:
    world.model.add(script.tool_call("echo", {"text": "hi"}, call_id="c1"), script.text("done"))
    system = world.open()
    agent = system.create()
    agent.send(ak.user("q1"), id="m1", metadata={"k": "v"})
    agent.wait_for_idle(timeout_seconds=10)

    events = all_events(system, agent.id)
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert types_of(events) == [
        "turn.queued",  # the send opened a turn ...
        "message.accepted",  # ... with its input, in the same transaction
        "turn.running",  # consumed: the turn runs
        "message",  # consumed into the conversation
        "assistant.block",  # the tool call
        "response.end",
        "tool.batch",
        "tool.result",
        "assistant.block",  # "done"
        "message",  # the response's whole assistant message
        "response.end",
        "turn.completed",  # the answer completes the turn
        "settled",
    ]
    (queued, accepted, _running, consumed, call, _, batch, result, text, said, end, done,
     settled) = events  # fmt: skip
    turn_id = queued.data["turn_id"]
    answer = {"role": "assistant", "parts": [{"type": "text", "text": "done"}]}
    assert said.data == {"role": "assistant", "message": answer}
    assert done.data["result"] == {"message": answer}
    assert accepted.data["message_id"] == "m1"
    assert accepted.data["delivery"] == "send"
    assert accepted.data["metadata"] == {"k": "v"}
    assert accepted.data["message"] == {"role": "user", "parts": [{"type": "text", "text": "q1"}]}
    assert (consumed.data["message_id"], consumed.data["delivery"]) == ("m1", "send")
    assert consumed.data["position"] == 1
    assert call.data["block"]["call_id"] == "c1"
    assert [c["call"]["call_id"] for c in batch.data["calls"]] == ["c1"]
    assert result.data["call_id"] == "c1"
    assert result.data["parts"] == [{"type": "text", "text": "echo hi"}]
    assert text.data["block"] == {"type": "text", "text": "done"}
    assert "tokens" in end.data
    # Every fact of the turn names it; settling comes after the turn ended.
    assert all(e.session_id == agent.id and e.turn_id == turn_id for e in events[:-1])
    assert settled.turn_id is None


def test_steering_is_accepted_as_steer(world: LedgerWorld) -> None:
    world.model.add(script.text("a"))
    system = world.open()
    agent = system.create()
    agent.steer(ak.user("now"), id="s1")
    agent.wait_for_idle(timeout_seconds=10)
    _, accepted, _, consumed = all_events(system, agent.id)[:4]
    assert (accepted.type, accepted.data["delivery"]) == ("message.accepted", "steer")
    assert (consumed.type, consumed.data["delivery"]) == ("message", "steer")


def test_an_idempotent_repeat_appends_nothing(world: LedgerWorld) -> None:
    system = world.open()
    agent = system.create()
    first = system.internals.accept(agent.id, "send", ak.user("q"), id="m1", start=False)
    again = system.internals.accept(agent.id, "send", ak.user("q"), id="m1", start=False)
    assert types_of(all_events(system, agent.id)) == ["turn.queued", "message.accepted"]
    assert (again.created, again.turn_id) == (False, first.turn_id)


def test_a_failed_turn_reports_its_failure_note(world: LedgerWorld) -> None:
    world.model.add(script.error("internal_error", "it broke"))
    system = world.open()
    agent = system.create()
    agent.send(ak.user("q"))
    agent.wait_for_idle(timeout_seconds=10)
    notes = [e for e in all_events(system, agent.id) if e.type == "failure.note"]
    assert len(notes) == 1
    assert "it broke" in notes[0].data["message"]["parts"][0]["text"]
    # The turn the failure ended is failed, in the note's transaction (docs/turns.md).
    failed = [e for e in all_events(system, agent.id) if e.type == "turn.failed"]
    assert [e.sequence for e in failed] == [notes[0].sequence + 1]
    assert failed[0].data["error"]["code"] == "inference_failed"


def test_a_metadata_change_is_an_event(world: LedgerWorld) -> None:
    system = world.open()
    agent = system.create()
    system.update_metadata(agent.id, {"a": 1})
    system.update_metadata(agent.id, {"b": 2})
    events = all_events(system, agent.id)
    assert types_of(events) == ["metadata.changed", "metadata.changed"]
    assert events[1].data == {"patch": {"b": 2}, "metadata": {"a": 1, "b": 2}}


def test_sequences_stay_dense_across_a_restart(world: LedgerWorld) -> None:
    world.model.add(script.text("a1"), script.text("a2"))
    system = world.open()
    agent = system.create()
    agent.send(ak.user("q1"))
    agent.wait_for_idle(timeout_seconds=10)
    before = all_events(system, agent.id)
    system.close(timeout_seconds=10)

    reopened = world.open()
    again = reopened.resolve(agent.id)
    again.send(ak.user("q2"))
    again.wait_for_idle(timeout_seconds=10)
    after = all_events(reopened, agent.id)
    assert after[: len(before)] == before
    assert [e.sequence for e in after] == list(range(1, len(after) + 1))
    assert len(after) > len(before)


def test_paging_returns_exactly_the_asked_window(world: LedgerWorld) -> None:
    system = world.open()
    agent = system.create()
    for n in range(25):
        system.update_metadata(agent.id, {"n": n})
    every = all_events(system, agent.id)
    assert len(every) == 25
    for after in (0, 1, 7, 24, 25, 30):
        for limit in (1, 3, 10, 1000):
            page = system.events(agent.id, after=after, limit=limit)
            assert page == every[after : after + limit]
    with pytest.raises(ak.InvalidConfigError, match="limit"):
        system.events(agent.id, limit=1001)
    with pytest.raises(ak.InvalidConfigError, match="limit"):
        system.events(agent.id, limit=0)
    with pytest.raises(ak.InvalidConfigError, match="after"):
        system.events(agent.id, after=-1)
    with pytest.raises(ak.UnknownAgentError):
        system.events("nosuchagent")
    with pytest.raises(ak.UnknownAgentError):
        system.subscribe("nosuchagent")


def test_a_deleted_agents_ledger_stays_readable_until_its_id_is_re_created(
    world: LedgerWorld,
) -> None:
    system = world.open()
    agent = system.create(id="keeper")
    system.update_metadata(agent.id, {"a": 1})
    system.delete(agent.id)
    assert types_of(system.events("keeper")) == ["metadata.changed"]
    # Re-creating the id wipes everything the previous agent stored, its ledger too: the new
    # session's sequence starts at 1 again.
    system.create(id="keeper")
    assert system.events("keeper") == []
    system.update_metadata("keeper", {"b": 2})
    assert [(e.sequence, e.data["patch"]) for e in system.events("keeper")] == [(1, {"b": 2})]


def test_no_statement_can_change_or_delete_an_event(world: LedgerWorld) -> None:
    system = world.open()
    agent = system.create()
    system.update_metadata(agent.id, {"a": 1})
    # The same refusal on every backend: the store's error, the rule's words, the driver's
    # own error (SQLite's or PostgreSQL's) only as its cause.
    with pytest.raises(StoreConstraintError, match="immutable") as refused:
        system.internals.store.transact(
            lambda tx: tx.sql.execute("UPDATE session_events SET type = 'x'")  # type: ignore[attr-defined]
        )
    assert refused.value.code == "store_constraint"
    assert str(refused.value) == "The store refused the write: session events are immutable"
    assert refused.value.__cause__ is not None
    with pytest.raises(StoreConstraintError, match="never deleted"):
        system.internals.store.transact(
            lambda tx: tx.sql.execute("DELETE FROM session_events")  # type: ignore[attr-defined]
        )
    assert types_of(system.events(agent.id)) == ["metadata.changed"]
