"""Every message sent to a session is a turn with the wire's states."""

from __future__ import annotations

import apsw
import pytest

import agentkeep as ak
from agentkeep.errors import StoreConstraintError
from agentkeep.persistence.interface import Transaction
from agentkeep.providers import script
from agentkeep.sessions import (
    InputTooLargeError,
    SessionBusyError,
    TurnRecord,
    UnknownSessionError,
    UnknownTurnError,
)

from .conftest import GATE, TurnWorld, turn_events


def test_a_sent_turn_runs_and_completes_with_the_answer(world: TurnWorld) -> None:
    world.model.add(script.text("hello back"))
    system = world.open()
    session = system.create()
    sent = system.sessions.send(session.id, "hello", idempotency_key="req-1")
    assert not sent.duplicate
    assert (sent.turn.status, sent.turn.number, sent.turn.idempotency_key) == ("queued", 1, "req-1")
    assert sent.turn.input == {"role": "user", "parts": [{"type": "text", "text": "hello"}]}

    done = sent.wait(timeout_seconds=10)
    assert done.status == "completed"
    assert done.result == {
        "message": {"role": "assistant", "parts": [{"type": "text", "text": "hello back"}]}
    }
    assert done.started_at_ms is not None
    assert done.completed_at_ms is not None
    assert done.error is None
    assert system.sessions.turn(session.id, done.id) == done
    assert system.sessions.turns(session.id) == [done]
    assert turn_events(system, session.id) == [
        ("turn.queued", done.id),
        ("turn.running", done.id),
        ("turn.completed", done.id),
    ]


def test_an_idempotency_key_never_makes_a_second_turn(world: TurnWorld) -> None:
    world.model.add(script.text("once"))
    system = world.open()
    session = system.create()
    first = system.sessions.send(session.id, "do it", idempotency_key="order 42 / üñí")
    first.wait(timeout_seconds=10)
    again = system.sessions.send(session.id, "do it", idempotency_key="order 42 / üñí")
    assert again.duplicate
    assert again.turn.id == first.turn.id
    assert again.turn.status == "completed"
    assert len(world.model.requests) == 1  # the model was asked once
    assert len(system.sessions.turns(session.id)) == 1
    with pytest.raises(ak.IdempotencyConflictError, match="order 42"):
        system.sessions.send(session.id, "do something else", idempotency_key="order 42 / üñí")
    assert len(system.sessions.turns(session.id)) == 1


def test_keys_outlive_a_model_reset_and_a_restart(world: TurnWorld) -> None:
    world.model.add(script.text("a"), script.text("b"))
    world.model.add_compactions(script.compacted(ak.user("summary of one")))
    system = world.open()
    session = system.create()
    first = system.sessions.send(session.id, "one", idempotency_key="k1", message_id="m1")
    first.wait(timeout_seconds=10)
    system.compact(session.id, wait=True, timeout_seconds=10)  # releases message id m1
    system.close()
    system = world.open()
    again = system.sessions.send(session.id, "one", idempotency_key="k1", message_id="m1")
    assert again.duplicate
    assert again.turn.id == first.turn.id


def test_bad_keys_are_refused_naming_the_problem(world: TurnWorld) -> None:
    system = world.open()
    session = system.create()
    for key, problem in (
        ("", "1 to 255"),
        ("x" * 256, "1 to 255"),
        ("a\nb", "control characters"),
        (42, "must be a string"),
    ):
        with pytest.raises(ak.InvalidMessageError, match=problem):
            system.sessions.send(session.id, "hi", idempotency_key=key)  # type: ignore[arg-type]
    assert system.sessions.turns(session.id) == []
    assert system.events(session.id) == []


def test_turns_run_in_order_one_at_a_time(world: TurnWorld) -> None:
    world.model.add(script.text("first"), script.text("second"))
    system = world.open()
    session = system.create()
    one = system.sessions.send(session.id, "1")
    two = system.sessions.send(session.id, "2")
    assert (one.turn.number, two.turn.number) == (1, 2)
    assert two.wait(timeout_seconds=10).result is not None
    assert one.wait(timeout_seconds=10).status == "completed"
    order = [(t, i) for t, i in turn_events(system, session.id) if t != "turn.queued"]
    assert order == [
        ("turn.running", one.turn.id),
        ("turn.completed", one.turn.id),
        ("turn.running", two.turn.id),
        ("turn.completed", two.turn.id),
    ]


def test_a_steer_joins_the_running_turn_which_ends_with_the_answer_that_saw_it(
    world: TurnWorld,
) -> None:
    world.model.add(script.tool_call("gate", {}, call_id="c1"), script.text("saw both"))
    system = world.open()
    session = system.create()
    sent = system.sessions.send(session.id, "start")
    assert GATE.started.wait(10)
    steered = system.sessions.send(session.id, "also this", delivery="steer")
    assert steered.turn.id == sent.turn.id  # joined, not a new turn
    assert steered.turn.status == "running"
    GATE.release.set()
    done = sent.wait(timeout_seconds=10)
    assert done.status == "completed"
    assert done.result is not None
    assert done.result["message"] == {
        "role": "assistant",
        "parts": [{"type": "text", "text": "saw both"}],
    }
    assert len(system.sessions.turns(session.id)) == 1
    # The answer's request saw the steering message.
    last = world.model.requests[-1].context
    assert "also this" in str(last)


def test_a_steer_with_no_running_turn_opens_one(world: TurnWorld) -> None:
    world.model.add(script.text("ok"))
    system = world.open()
    session = system.create()
    sent = system.sessions.send(session.id, "now", delivery="steer")
    assert sent.turn.number == 1
    assert sent.wait(timeout_seconds=10).status == "completed"


def test_cancelling_a_queued_turn_takes_its_message_out_of_the_queue(world: TurnWorld) -> None:
    world.model.add(script.tool_call("gate", {}, call_id="c1"), script.text("first done"))
    system = world.open()
    session = system.create()
    first = system.sessions.send(session.id, "first")
    assert GATE.started.wait(10)
    second = system.sessions.send(session.id, "second")
    cancelled = system.sessions.cancel(session.id, second.turn.id)
    assert cancelled.status == "cancelled"
    assert cancelled.error is not None
    assert cancelled.error.code == "cancelled"
    GATE.release.set()
    assert first.wait(timeout_seconds=10).status == "completed"
    system.wait_for_idle(session.id, timeout_seconds=10)
    texts = [str(m) for m in system.transcript(session.id)]
    assert not any("second" in t for t in texts)  # never entered the conversation
    assert len(world.model.requests) == 2
    assert system.sessions.cancel(session.id, second.turn.id) == cancelled  # terminal: unchanged


def test_cancelling_the_running_turn_aborts_it_and_the_next_turn_runs(world: TurnWorld) -> None:
    world.model.add(script.hang(), script.text("next answered"))
    system = world.open()
    session = system.create()
    first = system.sessions.send(session.id, "hang")
    assert world.model.wait_for_requests(1, timeout_seconds=10)
    second = system.sessions.send(session.id, "after")
    cancelled = system.sessions.cancel(session.id, timeout_seconds=10)  # the active turn
    assert cancelled.id == first.turn.id
    assert cancelled.status == "cancelled"
    statuses = [t for t, i in turn_events(system, session.id) if i == first.turn.id]
    assert statuses == ["turn.queued", "turn.running", "turn.cancelling", "turn.cancelled"]
    assert second.wait(timeout_seconds=10).status == "completed"


def test_a_failed_response_fails_the_turn(world: TurnWorld) -> None:
    world.model.add(script.error("internal_error", "it broke"))
    system = world.open()
    session = system.create()
    done = system.sessions.send(session.id, "q").wait(timeout_seconds=10)
    assert done.status == "failed"
    assert done.error is not None
    assert (done.error.code, "it broke" in done.error.message) == ("inference_failed", True)


def test_wait_times_out_on_a_live_turn(world: TurnWorld) -> None:
    world.model.add(script.hang())
    system = world.open()
    session = system.create()
    sent = system.sessions.send(session.id, "hang")
    with pytest.raises(TimeoutError, match="still"):
        sent.wait(timeout_seconds=0.2)
    system.sessions.cancel(session.id, timeout_seconds=10)


def test_an_archived_session_takes_no_message_and_a_live_turn_blocks_archiving(
    world: TurnWorld,
) -> None:
    system = world.open()
    session = system.create()
    system.internals.accept(session.id, "send", ak.user("waits"), start=False)
    with pytest.raises(SessionBusyError):
        system.sessions.archive(session.id)
    other = system.create()
    system.sessions.archive(other.id)
    with pytest.raises(ak.SessionArchivedError, match="archived"):
        system.sessions.send(other.id, "hello")
    with pytest.raises(ak.SessionArchivedError):
        system.send(other.id, ak.user("hello"))
    assert system.sessions.turns(other.id) == []


def test_an_input_over_max_input_bytes_is_refused_before_anything_is_written(
    world: TurnWorld,
) -> None:
    system = world.open(max_input_bytes=1024)
    session = system.create()
    with pytest.raises(InputTooLargeError, match=r"max_input_bytes \(1024\)"):
        system.sessions.send(session.id, "x" * 2000)
    assert system.events(session.id) == []
    assert system.sessions.turns(session.id) == []
    assert system.state(session.id) == "idle"


def test_a_native_turn_resumes_after_a_restart(world: TurnWorld) -> None:
    world.model.add(script.text("answered after the restart"))
    system = world.open()
    session = system.create()
    accepted = system.internals.accept(session.id, "send", ak.user("q"), start=False)
    system.close()
    system = world.open()  # resumes the owed work
    done = system.sessions.wait(session.id, str(accepted.turn_id), timeout_seconds=10)
    assert done.status == "completed"


def test_at_startup_cancelling_becomes_cancelled_and_other_drivers_are_interrupted(
    world: TurnWorld,
) -> None:
    system = world.open(resume=False)
    session = system.create()

    def setup(tx: Transaction) -> tuple[str, str]:
        native, _ = tx.turns.open(
            session.id, key="n", driver="agentkeep", delivery="send", input={}, message_id=None
        )
        tx.turns.move(session.id, native.id, "running")
        tx.turns.move(session.id, native.id, "cancelling")
        other, _ = tx.turns.open(
            session.id, key="o", driver="elsewhere", delivery="send", input={}, message_id=None
        )
        return native.id, other.id

    native_id, other_id = system.internals.store.handle.transact(setup)
    system.close()
    system = world.open(resume=False)
    assert system.sessions.turn(session.id, native_id).status == "cancelled"
    interrupted = system.sessions.turn(session.id, other_id)
    assert interrupted.status == "interrupted"
    assert interrupted.error is not None
    assert interrupted.error.code == "interrupted"


def test_a_terminal_status_never_changes_whoever_tries(world: TurnWorld) -> None:
    world.model.add(script.text("done"))
    system = world.open()
    session = system.create()
    done = system.sessions.send(session.id, "q").wait(timeout_seconds=10)
    with pytest.raises(ak.TurnStateError, match="completed; it cannot become failed"):
        system.internals.store.handle.transact(
            lambda tx: tx.turns.move(session.id, done.id, "failed")
        )
    with pytest.raises(StoreConstraintError, match="terminal turn status never changes"):
        system.internals.store.handle.transact(
            lambda tx: tx.sql.execute("UPDATE turns SET status = 'failed' WHERE id = ?", (done.id,))  # type: ignore[attr-defined]
        )
    with pytest.raises(StoreConstraintError, match="never released"):
        system.internals.store.handle.transact(
            lambda tx: tx.sql.execute("DELETE FROM turn_inputs WHERE turn_id = ?", (done.id,))  # type: ignore[attr-defined]
        )
    assert system.sessions.turn(session.id, done.id) == done


def test_unknown_session_and_turn_are_named(world: TurnWorld) -> None:
    system = world.open()
    session = system.create()
    with pytest.raises(UnknownSessionError, match="nope"):
        system.sessions.send("nope", "hi")
    with pytest.raises(UnknownTurnError, match="t404"):
        system.sessions.turn(session.id, "t404")
    with pytest.raises(ak.TurnStateError, match="no live turn to cancel: it is idle"):
        system.sessions.cancel(session.id)


def test_an_abort_cancels_the_running_turn(world: TurnWorld) -> None:
    world.model.add(script.hang(), script.hang())
    system = world.open()
    session = system.create()
    waited = system.sessions.send(session.id, "one")
    assert world.model.wait_for_requests(1, timeout_seconds=10)
    system.abort(session.id, wait=True, timeout_seconds=10)
    assert system.sessions.turn(session.id, waited.turn.id).status == "cancelled"

    # Without waiting: the intent is durable at once, the end comes with the settlement.
    told = system.sessions.send(session.id, "two")
    assert world.model.wait_for_requests(2, timeout_seconds=10)
    system.abort(session.id)
    assert system.sessions.turn(session.id, told.turn.id).status in ("cancelling", "cancelled")
    done = told.wait(timeout_seconds=10)
    assert done.status == "cancelled"
    assert done.error is not None
    assert done.error.code == "cancelled"
    assert system.wait_for_idle(session.id, timeout_seconds=10)  # the actor ends its run
    assert system.sessions.archive(session.id).status == "archived"  # nothing live


def test_open_survives_a_failing_recovery_transaction(
    world: TurnWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by the interruption chaos suite (seed 27): a store fault in the recovery's
    # transaction made AgentSystem.open raise. It is retried, and never fails the open.
    import agentkeep.agent_system._opening as opening_module
    from agentkeep.sessions import recovery

    system = world.open(resume=False)
    session = system.create()

    def cancelling(tx: Transaction) -> str:
        turn, _ = tx.turns.open(
            session.id, key="n", driver="agentkeep", delivery="send", input={}, message_id=None
        )
        tx.turns.move(session.id, turn.id, "running")
        tx.turns.move(session.id, turn.id, "cancelling")
        return turn.id

    turn_id = system.internals.store.handle.transact(cancelling)
    system.close()

    failures = [OSError("disk I/O error")]

    def flaky(tx: Transaction) -> list[TurnRecord]:
        if failures:
            raise failures.pop()
        return recovery.recover_turns(tx)

    monkeypatch.setattr(opening_module, "recover_turns", flaky)
    system = world.open(resume=False)  # the first attempt fails, the second recovers
    assert system.sessions.turn(session.id, turn_id).status == "cancelled"

    def cancelling_again(tx: Transaction) -> str:
        turn, _ = tx.turns.open(
            session.id, key="m", driver="agentkeep", delivery="send", input={}, message_id=None
        )
        tx.turns.move(session.id, turn.id, "running")
        tx.turns.move(session.id, turn.id, "cancelling")
        return turn.id

    second = system.internals.store.handle.transact(cancelling_again)
    system.close()

    def broken(tx: Transaction) -> list[TurnRecord]:
        raise OSError("disk I/O error")

    monkeypatch.setattr(opening_module, "recover_turns", broken)
    system = world.open(resume=False)  # every attempt fails: it opens anyway, deferred
    assert system.sessions.turn(session.id, second).status == "cancelling"


def test_what_send_returns_is_what_docs_turns_md_says(world: TurnWorld) -> None:
    """A brand-new session's first turn comes back ``queued`` (no actor has
    loaded it yet); a message to an idle session whose actor is live is consumed in its
    acceptance's transaction and comes back ``running``."""
    world.model.add(script.text("one"), script.text("two"))
    system = world.open()
    session = system.create()
    first = system.sessions.send(session.id, "first")
    assert first.turn.status == "queued"
    assert first.wait(timeout_seconds=10).status == "completed"
    assert system.wait_for_idle(session.id, timeout_seconds=10)
    second = system.sessions.send(session.id, "second")
    assert second.turn.status == "running"
    kinds = [t for t, i in turn_events(system, session.id) if i == second.turn.id]
    assert kinds[:2] == ["turn.queued", "turn.running"]
    assert second.wait(timeout_seconds=10).status == "completed"


@pytest.mark.sqlite_only(
    "rewrites agents.db as a store written before the wire's message shape was; PostgreSQL "
    "stores came later (and no tool copies a SQLite store there), so none holds such a row"
)
def test_a_key_accepted_before_seed_002s_message_shape_still_returns_its_turn(
    world: TurnWorld,
) -> None:
    """A store written before the wire's message shape hashed a turn's
    input as the conversation's own JSON
    (``{role, content}``); a retry of such a key after the upgrade is that turn, not a
    conflict."""
    import msgspec

    from agentkeep.persistence.turn_reads import input_hash

    world.model.add(script.text("once"))
    system = world.open()
    session = system.create()
    first = system.sessions.send(session.id, "do it", idempotency_key="before")
    first.wait(timeout_seconds=10)
    system.close(timeout_seconds=10)
    as_before = input_hash("send", msgspec.to_builtins(ak.user("do it")))
    # Rewrite the row as the older version wrote it (past the trigger keeping it immutable).
    connection = apsw.Connection(str(world.home / "agents.db"))
    triggers = connection.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'turn_inputs'"
    ).fetchall()
    with connection:
        for name, _sql in triggers:
            connection.execute(f'DROP TRIGGER "{name}"')
        connection.execute(
            "UPDATE turn_inputs SET input_hash = ? WHERE idempotency_key = ?", (as_before, "before")
        )
        for _name, sql in triggers:
            connection.execute(sql)
    connection.close()

    system = world.open()
    again = system.sessions.send(session.id, "do it", idempotency_key="before")
    assert again.duplicate
    assert again.turn.id == first.turn.id
    assert len(world.model.requests) == 1
    with pytest.raises(ak.IdempotencyConflictError):
        system.sessions.send(session.id, "something else", idempotency_key="before")
