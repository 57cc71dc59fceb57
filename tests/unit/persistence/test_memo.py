"""The writer's memo (persistence/memo.py): later transactions read no tail, queue
or turn the writer already knows, and nothing it remembers outlives a rollback — of a work
item, of a whole group, of a COMMIT of unknown outcome, of an injected fault at any store
operation, of a writer that failed and was restarted."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw
import pytest

from agentkeep.errors import CommitOutcomeUnknownError, StoreError, StoreUnavailableError
from agentkeep.persistence import FaultPlan, Store, Transaction
from agentkeep.persistence.codec import (
    decode_message,
    decode_notice,
    decode_owed,
    decode_settings,
)
from agentkeep.persistence.faults import InjectedWriterCrashError
from agentkeep.persistence.schema import migrate
from agentkeep.types import Settings, SystemMessage, TextBlock, ToolCallBlock, UserMessage
from agentkeep.types.records import (
    AgentRow,
    OwedWork,
    PendingToolCall,
    QueuedMessage,
    QueuedNotice,
    UserRecord,
)

TIMEOUT = 30.0
A = "a"


class BoomError(Exception):
    pass


def _message(mid: str) -> QueuedMessage:
    return QueuedMessage(id=mid, queue="send", message=UserMessage(content=()))


def _record(text: str) -> UserRecord:
    return UserRecord(message_id=text, message=UserMessage(content=(TextBlock(text=text),)))


def step(i: int, *, others: bool = True) -> Callable[[Transaction], None]:
    """One transaction touching every remembered fact of session ``A`` (like a durable step:
    finish the running turn, open and start the next, consume and enqueue, append); with
    ``others``, also owed work, settings, notices and pending calls."""

    def work(tx: Transaction) -> None:
        tx.ledger.append(A, "note", {"i": i})
        tx.records.append(A, _record(f"r{i}"))
        tx.records.count(A)
        for turn in tx.turns.live(A):
            if turn.status == "running":
                tx.turns.move(A, turn.id, "completed", result={"i": i})
        turn, _ = tx.turns.open(
            A, key=None, driver="native", delivery="send", input={"i": i}, message_id=f"m{i}"
        )
        tx.turns.move(A, turn.id, "running")
        for message in tx.queue.messages(A, "send"):
            tx.queue.dequeue(A, "send", message.seq)
        tx.queue.enqueue(A, _message(f"m{i}"))
        tx.facts.write_context_tokens(A, i)
        tx.turns.inputs_queued(A, turn.id)
        tx.turns.of_message(A, f"m{i}")
        if others:
            _others(tx, i, turn.id)
        tx.ledger.append(A, "note", {"i": i, "end": True}, turn_id=tx.turns.running_id(A))

    return work


def _others(tx: Transaction, i: int, turn_id: str) -> None:
    """Change and read the other remembered facts: owed work, settings, notices, calls."""
    ours = OwedWork(stage="inference", turn_id=turn_id)
    if not tx.facts.claim_owed(A, ours):
        assert tx.facts.read_owed(A) != ours  # refused: an earlier turn's fact stays
        tx.facts.write_owed(A, OwedWork(stage="tools"))
        tx.facts.read_owed(A)
        if i % 2 == 0:
            tx.facts.delete_owed(A)
    tx.facts.read_owed(A)
    tx.facts.write_settings(A, Settings(model=f"m{i % 3}"))
    tx.facts.read_settings(A)
    for notice in tx.queue.notices(A)[:1]:
        tx.queue.remove_notice(A, notice.seq)
    tx.queue.inject_notice(A, QueuedNotice(message=SystemMessage(content=(TextBlock(text="n"),))))
    for call in tx.calls.pending(A)[1:]:
        tx.calls.remove(A, call.internal_id)
    block = ToolCallBlock(call_id=f"c{i}", name="t", arguments="{}")
    tx.calls.put(A, [PendingToolCall(internal_id=f"p{i}", index=i, call=block)])
    tx.queue.notices(A)
    tx.calls.pending(A)


def check_memo_matches_the_store(store: Store) -> None:
    """Through the writer (so the memo answers), compare each remembered fact with SQL run in
    the same transaction; then append once more and check every sequence is dense."""

    def compare(tx: Transaction) -> None:
        sql = tx.sql.query  # type: ignore[attr-defined]
        events = [
            row[0] for row in sql("SELECT sequence FROM session_events WHERE agent_id = ?", (A,))
        ]
        assert events == list(range(1, len(events) + 1))
        assert tx.ledger.last_sequence(A) == len(events)
        positions = [row[0] for row in sql("SELECT position FROM records WHERE agent_id = ?", (A,))]
        assert sorted(positions) == list(range(1, len(positions) + 1))
        assert tx.records.count(A) == len(positions)
        queued = [
            decode_message(row[0])
            for row in sql("SELECT envelope_json FROM queue WHERE agent_id = ? ORDER BY seq", (A,))
        ]
        assert tx.queue.messages(A) == queued
        assert tx.queue.messages(A, "send") == queued
        live = [
            row[0]
            for row in sql(
                "SELECT id FROM turns WHERE agent_id = ? AND status IN "
                "('queued', 'running', 'cancelling') ORDER BY number",
                (A,),
            )
        ]
        running = [
            row[0]
            for row in sql(
                "SELECT id FROM turns WHERE agent_id = ? AND status IN ('running', 'cancelling') "
                "ORDER BY number",
                (A,),
            )
        ]
        assert tx.turns.running_id(A) == (running[-1] if running else None)
        assert [turn.id for turn in tx.turns.started(A)] == running
        remembered = tx.turns.live(A)
        assert [turn.id for turn in remembered] == live
        numbers = [row[0] for row in sql("SELECT number FROM turns WHERE agent_id = ?", (A,))]
        assert sorted(numbers) == list(range(1, len(numbers) + 1))
        for turn in remembered:
            [row] = sql("SELECT status, result_json FROM turns WHERE id = ?", (turn.id,))
            assert (turn.status, turn.result) == (row[0], None if row[1] is None else turn.result)
            assert tx.turns.inputs_queued(A, turn.id) == bool(
                sql(
                    "SELECT 1 FROM turn_inputs AS i JOIN queue AS q ON q.agent_id = i.agent_id "
                    "AND q.message_id = i.message_id WHERE i.turn_id = ?",
                    (turn.id,),
                )
            )
        tokens = sql("SELECT tokens FROM context_tokens WHERE agent_id = ?", (A,))
        assert tx.facts.read_context_tokens(A) == (tokens[0][0] if tokens else None)
        owed = sql("SELECT owed_json FROM owed_work WHERE agent_id = ?", (A,))
        assert tx.facts.read_owed(A) == (decode_owed(owed[0][0]) if owed else None)
        settings = sql("SELECT settings_json FROM settings WHERE agent_id = ?", (A,))
        assert tx.facts.read_settings(A) == (decode_settings(settings[0][0]) if settings else None)
        notices = sql("SELECT notice_json FROM notices WHERE agent_id = ? ORDER BY seq", (A,))
        assert tx.queue.notices(A) == [decode_notice(row[0]) for row in notices]
        calls = sql("SELECT internal_id FROM pending_calls WHERE agent_id = ? ORDER BY idx", (A,))
        assert [call.internal_id for call in tx.calls.pending(A)] == [row[0] for row in calls]

    store.transact(compare)
    store.transact(step(1000))
    store.transact(compare)


def test_later_transactions_read_nothing_the_writer_knows(
    store: Store, executed: list[str]
) -> None:
    store.transact(step(1, others=False))
    executed.clear()
    store.transact(step(2, others=False))
    # Every tail, queue, turn and fact was remembered from the first step.
    assert [sql for sql in executed if sql.startswith("SELECT")] == []
    check_memo_matches_the_store(store)


def test_an_item_rolled_back_leaves_nothing_remembered(store: Store) -> None:
    store.transact(step(1))

    def fails(tx: Transaction) -> None:
        step(2)(tx)
        raise BoomError

    with pytest.raises(BoomError):
        store.transact(fails)
    check_memo_matches_the_store(store)


def _one_group(store: Store, works: list[Callable[[Transaction], Any]]) -> list[Any]:
    """Run ``works`` as one group (the writer held until all are queued); their outcomes."""
    started, release = threading.Event(), threading.Event()

    def blocker(tx: Transaction) -> None:
        started.set()
        assert release.wait(TIMEOUT)

    holder = threading.Thread(target=store.transact, args=(blocker,))
    holder.start()
    assert started.wait(TIMEOUT)
    outcomes: list[Any] = [None] * len(works)

    def submit(index: int) -> None:
        try:
            outcomes[index] = store.transact(works[index])
        except BaseException as exc:
            outcomes[index] = exc

    threads = []
    for index in range(len(works)):
        thread = threading.Thread(target=submit, args=(index,))
        thread.start()
        threads.append(thread)
        assert store.handle.wait_for_queued(index + 1, timeout_seconds=TIMEOUT)
    release.set()
    for thread in [holder, *threads]:
        thread.join(TIMEOUT)
    return outcomes


def test_the_last_item_of_a_group_rolled_back_is_not_committed_into_the_memo(
    store: Store,
) -> None:
    store.transact(step(1))

    def fails(tx: Transaction) -> None:
        step(3)(tx)
        raise BoomError

    outcomes = _one_group(store, [step(2), fails])
    assert outcomes[0] is None
    assert isinstance(outcomes[1], BoomError)
    assert store.statistics().max_group_size == 2
    check_memo_matches_the_store(store)


def test_a_group_rolled_back_as_a_whole_leaves_nothing_remembered(store: Store) -> None:
    store.transact(step(1))

    def abandons(tx: Transaction) -> None:
        step(3)(tx)
        # What SQLite does on its own after some errors (a full disk, an I/O error): the
        # whole transaction is gone, past the executor, so the writer rolls back the group.
        tx._x.statements.connection.execute("ROLLBACK")  # type: ignore[attr-defined]
        raise BoomError

    outcomes = _one_group(store, [step(2), abandons])
    assert isinstance(outcomes[0], StoreError)
    assert isinstance(outcomes[1], BoomError)
    check_memo_matches_the_store(store)


class FailingSyncVFS(apsw.VFS):  # type: ignore[misc]
    """The default VFS, whose next ``xSync`` fails once armed: the COMMIT that needs it
    reports an I/O error (its outcome unknown to the writer)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.armed = threading.Event()
        super().__init__(name, "")

    def xOpen(self, name: Any, flags: list[int]) -> apsw.VFSFile:  # noqa: N802  # apsw's name
        return _FailingSyncFile(name, flags, self.armed)


class _FailingSyncFile(apsw.VFSFile):  # type: ignore[misc]
    def __init__(self, name: Any, flags: list[int], armed: threading.Event) -> None:
        super().__init__("", name, flags)
        self._armed = armed

    def xSync(self, flags: int) -> None:  # noqa: N802  # apsw's name
        if self._armed.is_set():
            self._armed.clear()
            raise apsw.IOError("injected sync failure")
        super().xSync(flags)


@pytest.mark.sqlite_only("the commit fails through the fault-injecting VFS")
def test_a_commit_that_fails_leaves_nothing_remembered(tmp_path: Path) -> None:
    vfs = FailingSyncVFS("agentkeep-memo-failing-sync")
    try:
        with Store.open(tmp_path, vfs=vfs.name) as store:
            store.transact(lambda tx: tx.agents.create(AgentRow(id=A, config={})))
            store.transact(step(1))
            vfs.armed.set()
            with pytest.raises(CommitOutcomeUnknownError):
                store.transact(step(2))
            assert store.statistics().commit_errors == 1
            check_memo_matches_the_store(store)
    finally:
        vfs.unregister()


def test_an_items_events_are_written_by_one_statement_and_seen_by_its_reads(
    store: Store, executed: list[str]
) -> None:
    store.transact(step(1))

    def appends(tx: Transaction) -> list[Any]:
        first = [tx.ledger.append(A, "note", {"n": n}) for n in range(3)]
        seen = [event.sequence for event in tx.ledger.events(A, first[0] - 1, 10)]
        second = [tx.ledger.append(A, "note", {"n": n}) for n in range(3, 5)]
        return [first, seen, second]

    executed.clear()
    first, seen, second = store.transact(appends)
    assert seen == first  # the read wrote the buffered events first
    assert second == [first[-1] + 1, first[-1] + 2]
    inserts = [sql for sql in executed if sql.startswith("INSERT INTO session_events")]
    assert len(inserts) == 2  # one before the read, one before RELEASE
    events = store.read(lambda tx: tx.ledger.events(A, first[0] - 1, 10))
    assert [(e.sequence, e.data) for e in events] == [
        (sequence, {"n": n}) for n, sequence in enumerate(first + second)
    ]
    check_memo_matches_the_store(store)


def test_raw_sql_makes_the_writer_forget(store: Store) -> None:
    store.transact(step(1))

    def raw(tx: Transaction) -> None:
        tx.ledger.append(A, "note", {"before": "raw"})  # buffered until the raw SQL runs
        tx.sql.execute(  # type: ignore[attr-defined]
            "INSERT INTO session_events (agent_id, sequence, type, data_json, created_at_ms) "
            "SELECT ?1, max(sequence) + 1, 'raw', '{}', 0 FROM session_events "
            "WHERE agent_id = ?1",
            (A,),
        )
        tx.sql.execute("DELETE FROM queue WHERE agent_id = ?", (A,))  # type: ignore[attr-defined]

    store.transact(raw)
    check_memo_matches_the_store(store)


def test_raw_savepoints_of_the_writers_name_make_the_writer_forget(store: Store) -> None:
    store.transact(step(1))

    def nested(tx: Transaction) -> None:
        raw = tx.sql.execute  # type: ignore[attr-defined]
        raw("SAVEPOINT agentkeep_work_item")
        tx.ledger.append(A, "note", {"inner": True})
        raw("RELEASE agentkeep_work_item")
        raise BoomError  # the item's own savepoint rolls the event back

    with pytest.raises(BoomError):
        store.transact(nested)
    check_memo_matches_the_store(store)


class Restarting:
    """Runs transactions on a supervised store, restarting its writer when a fault ended it
    (what the supervisor does); a transaction that fails is not retried."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.writer = store.start_writer()

    def run(self, work: Callable[[Transaction], Any]) -> None:
        try:
            self.store.transact(work)
        except StoreError as error:
            self._restart_if_ended([error])

    def _restart_if_ended(self, errors: list[BaseException]) -> None:
        for error in errors:
            ended = isinstance(error, StoreUnavailableError) or isinstance(
                error.__cause__, InjectedWriterCrashError
            )
            if ended:
                assert self.writer.actor_stopped.wait(TIMEOUT)
                self.writer = self.store.start_writer()  # a fresh connection
                return

    def run_group(self, works: list[Callable[[Transaction], Any]]) -> None:
        """Run ``works`` as one group (savepoints per item): the writer is held by a lone
        item until they all queued; if the fault ended that item first, run them alone."""
        ready, held, release = threading.Event(), threading.Event(), threading.Event()
        errors: list[BaseException] = []

        def blocker(tx: Transaction) -> None:
            held.set()
            ready.set()
            assert release.wait(TIMEOUT)

        def submit(work: Callable[[Transaction], Any], signal: threading.Event | None) -> None:
            try:
                self.store.transact(work)
            except StoreError as error:
                errors.append(error)
            finally:
                if signal is not None:
                    signal.set()

        holder = threading.Thread(target=submit, args=(blocker, ready))
        holder.start()
        assert ready.wait(TIMEOUT)
        if not held.is_set():  # the holder's own BEGIN failed: nothing holds the writer
            holder.join(TIMEOUT)
            self._restart_if_ended(errors)
            for work in works:
                self.run(work)
            return
        threads = [threading.Thread(target=submit, args=(work, None)) for work in works]
        for index, thread in enumerate(threads):
            thread.start()
            assert self.store.handle.wait_for_queued(index + 1, timeout_seconds=TIMEOUT)
        release.set()
        for thread in [holder, *threads]:
            thread.join(TIMEOUT)
        self._restart_if_ended(errors)

    def workload(self, *, grouped: bool = False) -> None:
        for _ in range(2):  # a fault may hit the creation: once more then
            if self.store.read(lambda tx: tx.agents.get(A)) is None:
                self.run(lambda tx: tx.agents.create(AgentRow(id=A, config={})))
        for i in range(1, 3):
            if grouped:
                self.run_group([step(i), lambda tx: tx.kv.write("k", 1)])
            else:
                self.run(step(i))
        self.run(lambda tx: None)  # restarts the writer if the last step's fault ended it


@pytest.mark.parametrize("grouped", [False, True], ids=["lone-items", "groups"])
@pytest.mark.parametrize("mode", ["flaky", "writer"])
def test_a_fault_at_any_store_operation_leaves_the_memo_true(
    tmp_path: Path, mode: str, grouped: bool
) -> None:
    # Lone items run without savepoints, groups of several with one per item: both swept.
    with Store.open(tmp_path / "count", start_writer=False) as store:
        Restarting(store).workload(grouped=grouped)
        count = store.statistics().operations
        assert store.statistics().max_group_size == (2 if grouped else 1)
    commit_errors = 0
    for at in range(1, count + 1):
        plan = FaultPlan(at=at, mode=mode)  # type: ignore[arg-type]
        with Store.open(tmp_path / f"{mode}{at}", faults=plan, start_writer=False) as store:
            Restarting(store).workload(grouped=grouped)
            commit_errors += store.statistics().commit_errors
            check_memo_matches_the_store(store)
    # The sweep hit COMMITs too (their outcome unknown to the writer).
    assert commit_errors >= 3 or mode == "writer"


def test_no_trigger_writes_a_table(tmp_path: Path) -> None:
    """The memo assumes only its methods write the tables it remembers: every trigger of the
    schema only refuses (RAISE); none inserts, updates or deletes."""
    connection = apsw.Connection(str(tmp_path / "t.db"))
    migrate(connection)
    triggers = connection.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")
    found = 0
    for name, sql in triggers:
        found += 1
        # The body's statements, their messages ('...') left out.
        body = re.sub(r"'[^']*'", "''", sql.upper().split("BEGIN", 1)[1])
        assert re.search(r"\bRAISE\b", body), name
        found_write = re.search(r"\b(INSERT|UPDATE|DELETE|REPLACE)\b", body)
        assert found_write is None, f"trigger {name} writes ({found_write and found_write[0]})"
    assert found >= 8


def test_a_durable_step_runs_at_most_40_statements(tmp_path: Path, executed: list[str]) -> None:
    """A step (send, durable acceptance and consumption, a one-block reply, idle) ran 58
    statements before the memo; now each tail, queue and turn it knows is not read again."""
    import agentkeep as ak
    from agentkeep.providers import script

    model = ak.ScriptedModel([script.text("ok") for _ in range(4)])
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    with ak.AgentSystem.open(
        tmp_path / "s", providers=providers, provider="local", model="gym-1"
    ) as system:
        agent = system.create()
        for text in ("warm up", "again"):
            agent.send(ak.user(text))
            agent.wait_for_idle(timeout_seconds=TIMEOUT)
        executed.clear()
        agent.send(ak.user("step"))
        agent.wait_for_idle(timeout_seconds=TIMEOUT)
        statements = list(executed)
    assert statements.count("COMMIT") <= 2
    assert len(statements) <= 40, statements


def test_remembered_agents_and_sessions_follow_every_change(
    store: Store, executed: list[str]
) -> None:
    from agentkeep.sessions import tables

    store.transact(lambda tx: tx.agents.create(AgentRow(id="child", config={}, parent_id=A)))

    def facts(tx: Transaction) -> tuple[Any, ...]:
        child = tx.agents.get("child")
        return (
            tx.agents.get(A) is not None,
            None if child is None else child.parent_id,
            None if child is None else child.metadata,
            tx.turns.session_archived(A),
            tables.session_driver(tx, A),
        )

    assert store.transact(facts) == (True, A, {}, False, "agentkeep")
    executed.clear()
    assert store.transact(facts) == (True, A, {}, False, "agentkeep")
    assert [sql for sql in executed if sql.startswith("SELECT")] == []

    def renamed(tx: Transaction) -> tuple[Any, ...]:
        tx.agents.update_metadata("child", {"k": 1})
        return facts(tx)

    def deleted(tx: Transaction) -> tuple[Any, ...]:
        tx.agents.delete(A)  # the child's parent_id goes too
        return facts(tx)

    def archived(tx: Transaction) -> tuple[Any, ...]:
        tables.archive(tx, A, 5)  # raw SQL: the memo forgets everything
        return facts(tx)

    assert store.transact(renamed) == (True, A, {"k": 1}, False, "agentkeep")
    assert store.transact(facts) == (True, A, {"k": 1}, False, "agentkeep")
    assert store.transact(deleted) == (False, None, {"k": 1}, False, "agentkeep")
    assert store.transact(facts) == (False, None, {"k": 1}, False, "agentkeep")
    assert store.transact(archived) == (False, None, {"k": 1}, True, "agentkeep")
    assert store.transact(facts) == (False, None, {"k": 1}, True, "agentkeep")
    assert store.read(facts) == (False, None, {"k": 1}, True, "agentkeep")
