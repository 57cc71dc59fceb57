"""The Transaction's domain operations, through a real store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentkeep.errors import ExpiredScopeError, StoreConstraintError, UnknownAgentError
from agentkeep.persistence import ReadOnlyTransactionError, Store, Transaction, agent_prefix
from agentkeep.types import (
    Settings,
    SystemMessage,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
)
from agentkeep.types.records import (
    AgentRow,
    BlockRecord,
    CompactionRecord,
    OwedWork,
    PendingToolCall,
    QueuedMessage,
    QueuedNotice,
    SystemRecord,
    UserRecord,
)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path) as opened:
        opened.transact(lambda tx: tx.agents.create(AgentRow(id="a", config={"role": "main"})))
        yield opened


def _user(text: str) -> UserRecord:
    return UserRecord(message_id=text, message=UserMessage(content=(TextBlock(text=text),)))


def _result(call_id: str, text: str) -> ToolResultMessage:
    return ToolResultMessage(call_id=call_id, content=(TextBlock(text=text),))


def _call(internal_id: str, index: int) -> PendingToolCall:
    return PendingToolCall(
        internal_id=internal_id,
        index=index,
        call=ToolCallBlock(call_id=f"p{internal_id}", name="search", arguments="{}"),
    )


def test_create_agent_refuses_a_live_id_and_get_agent_returns_it(store: Store) -> None:
    assert store.transact(lambda tx: tx.agents.create(AgentRow(id="a", config={}))) is False
    row = store.read(lambda tx: tx.agents.get("a"))
    assert row is not None
    assert row.config == {"role": "main"}
    assert row.created_at_ms > 0


def test_recreating_a_deleted_agent_wipes_everything_it_stored(store: Store) -> None:
    def fill(tx: Transaction) -> None:
        tx.records.append("a", _user("hello"))
        tx.queue.claim_message_id("a", "m1")
        tx.queue.enqueue("a", QueuedMessage(id="m2", queue="send", message=UserMessage(content=())))
        tx.calls.put("a", [_call("c1", 0)])
        tx.calls.claim_result("a", "c1", _result("pc1", "ok"))
        tx.facts.write_owed("a", OwedWork(stage="tools"))
        tx.facts.write_settings("a", Settings(model="m"))
        tx.facts.write_context_tokens("a", 10)
        tx.kv.write(agent_prefix("a") + "x", 1)
        tx.kv.write(agent_prefix("ab") + "x", 2)  # another agent's prefix survives

    store.transact(fill)
    assert store.transact(lambda tx: tx.agents.delete("a")) is True
    assert store.read(lambda tx: tx.agents.get("a")) is None
    # Deleting keeps what the agent wrote.
    assert store.read(lambda tx: tx.records.count("a")) == 1
    assert store.transact(lambda tx: tx.agents.create(AgentRow(id="a", config={}))) is True

    def everything(tx: Transaction) -> tuple[object, ...]:
        return (
            tx.records.load("a"),
            tx.queue.claim_message_id("a", "m1"),
            tx.queue.messages("a"),
            tx.calls.pending("a"),
            tx.facts.read_owed("a"),
            tx.facts.read_settings("a"),
            tx.facts.read_context_tokens("a"),
            tx.kv.scan(agent_prefix("a")),
            tx.kv.read(agent_prefix("ab") + "x"),
        )

    assert store.transact(everything) == ([], True, [], [], None, None, None, [], 2)


def test_delete_agent_makes_its_children_roots(store: Store) -> None:
    def family(tx: Transaction) -> None:
        tx.agents.create(AgentRow(id="b", config={}, parent_id="a"))
        tx.agents.create(AgentRow(id="c", config={}, parent_id="a"))

    store.transact(family)
    assert store.read(lambda tx: tx.agents.children_of("a")) == ["b", "c"]
    store.transact(lambda tx: tx.agents.delete("a"))
    assert store.read(lambda tx: [row.parent_id for row in tx.agents.live()]) == [None, None]
    assert store.transact(lambda tx: tx.agents.delete("a")) is False


def test_update_metadata_merges_shallowly_and_refuses_unknown_agents(store: Store) -> None:
    store.transact(lambda tx: tx.agents.update_metadata("a", {"x": 1, "y": {"z": 1}}))
    merged = store.transact(lambda tx: tx.agents.update_metadata("a", {"y": {"w": 2}}))
    assert merged == {"x": 1, "y": {"w": 2}}
    with pytest.raises(UnknownAgentError):
        store.transact(lambda tx: tx.agents.update_metadata("nobody", {}))


def test_records_stay_dense_from_one_and_compaction_keeps_later_records_after_it(
    store: Store,
) -> None:
    positions = store.transact(lambda tx: [tx.records.append("a", _user(str(i))) for i in range(4)])
    assert positions == [1, 2, 3, 4]
    summary = CompactionRecord(messages=(SystemMessage(content=(TextBlock(text="sum"),)),))
    store.transact(lambda tx: tx.records.replace("a", 3, summary))
    assert store.read(lambda tx: tx.records.load("a")) == [summary, _user("3")]
    # Positions stay 1..count: the kept record moved to 2, the next append is 3.
    assert store.transact(lambda tx: tx.records.append("a", _user("5"))) == 3
    assert store.read(lambda tx: tx.records.count("a")) == 3
    # A second compaction by count replaces exactly what it summarised.
    store.transact(lambda tx: tx.records.replace("a", 2, summary))
    assert store.read(lambda tx: tx.records.load("a")) == [summary, _user("5")]
    store.transact(lambda tx: tx.records.rewrite("a", [_user("x")]))
    assert store.read(lambda tx: tx.records.load("a")) == [_user("x")]


def test_records_decode_as_the_exact_record_types(store: Store) -> None:
    records = [
        _user("u"),
        BlockRecord(block=TextBlock(text="t")),
        SystemRecord(message=SystemMessage(content=()), reason="failure"),
    ]
    store.transact(lambda tx: [tx.records.append("a", record) for record in records])
    assert store.read(lambda tx: tx.records.load("a")) == records


def test_message_ids_are_claimed_once_until_released(store: Store) -> None:
    assert store.transact(lambda tx: tx.queue.claim_message_id("a", "m")) is True
    assert store.transact(lambda tx: tx.queue.claim_message_id("a", "m")) is False
    store.transact(lambda tx: tx.queue.release_message_ids("a", ["m"]))
    assert store.transact(lambda tx: tx.queue.claim_message_id("a", "m")) is True


def test_queue_seqs_grow_strictly_and_are_never_reused(store: Store) -> None:
    def message(mid: str, queue: str) -> QueuedMessage:
        return QueuedMessage(id=mid, queue=queue, message=UserMessage(content=()))  # type: ignore[arg-type]

    first = store.transact(lambda tx: tx.queue.enqueue("a", message("1", "send")))
    steer = store.transact(lambda tx: tx.queue.enqueue("a", message("2", "steering")))
    assert (first.seq, steer.seq) == (1, 1)
    assert store.transact(lambda tx: tx.queue.dequeue("a", "send", 1)) is True
    assert store.transact(lambda tx: tx.queue.dequeue("a", "send", 1)) is False
    again = store.transact(lambda tx: tx.queue.enqueue("a", message("3", "send")))
    assert again.seq == 2  # the consumed tail's seq is not handed out again
    assert [m.id for m in store.read(lambda tx: tx.queue.messages("a"))] == ["2", "3"]
    assert [m.id for m in store.read(lambda tx: tx.queue.messages("a", "send"))] == ["3"]


def test_notices_keep_fifo_order(store: Store) -> None:
    def notice(text: str) -> QueuedNotice:
        return QueuedNotice(message=SystemMessage(content=(TextBlock(text=text),)))

    seqs = store.transact(lambda tx: [tx.queue.inject_notice("a", notice(t)).seq for t in "xyz"])
    assert seqs == [1, 2, 3]
    assert store.transact(lambda tx: tx.queue.remove_notice("a", 2)) is True
    texts = store.read(lambda tx: [n.message.content[0] for n in tx.queue.notices("a")])
    assert texts == [TextBlock(text="x"), TextBlock(text="z")]


def test_tool_results_are_first_writer_wins_and_need_their_call(store: Store) -> None:
    store.transact(lambda tx: tx.calls.put("a", [_call("c2", 1), _call("c1", 0)]))
    assert [c.internal_id for c in store.read(lambda tx: tx.calls.pending("a"))] == ["c1", "c2"]
    assert store.transact(lambda tx: tx.calls.claim_result("a", "c1", _result("pc1", "1")))
    assert not store.transact(lambda tx: tx.calls.claim_result("a", "c1", _result("pc1", "2")))
    assert store.read(lambda tx: tx.calls.result_claim("a", "c1")) == _result("pc1", "1")
    assert not store.transact(lambda tx: tx.calls.claim_result("a", "nope", _result("x", "1")))
    assert store.transact(lambda tx: tx.calls.mark_committed("a", "c2", _result("pc2", "e")))
    assert store.read(lambda tx: tx.calls.pending("a"))[1].committed == _result("pc2", "e")
    assert store.transact(lambda tx: tx.calls.remove("a", "c1")) is True
    assert store.transact(lambda tx: tx.calls.remove("a", "c1")) is False
    assert store.read(lambda tx: tx.calls.result_claim("a", "c1")) is None
    assert not store.transact(lambda tx: tx.calls.mark_committed("a", "c1", _result("x", "")))


def test_owed_work_is_claimed_once_and_indexed_for_live_agents(store: Store) -> None:
    owed = OwedWork(stage="inference", loop_id="l")
    assert store.transact(lambda tx: tx.facts.claim_owed("a", owed)) is True
    assert store.transact(lambda tx: tx.facts.claim_owed("a", OwedWork(stage="tools"))) is False
    store.transact(lambda tx: tx.facts.write_owed("a", OwedWork(stage="tools")))
    assert store.read(lambda tx: tx.facts.read_owed("a")) == OwedWork(stage="tools")
    assert store.read(lambda tx: tx.facts.agents_owing_work()) == ["a"]
    store.transact(lambda tx: tx.agents.delete("a"))
    assert store.read(lambda tx: tx.facts.agents_owing_work()) == []
    assert store.transact(lambda tx: tx.facts.delete_owed("a")) is True
    assert store.transact(lambda tx: tx.facts.delete_owed("a")) is False


def test_identical_owed_write_is_not_rewritten(store: Store) -> None:
    owed = OwedWork(stage="inference", turn_id="t")
    store.transact(lambda tx: tx.facts.write_owed("a", owed))

    def rewrite(tx: Transaction) -> int:
        tx.facts.write_owed("a", owed)
        return int(store_changes(tx))

    def store_changes(tx: Transaction) -> int:
        return tx._x.statements.changes()  # type: ignore[attr-defined]

    assert store.transact(rewrite) == 0


def test_settings_and_context_tokens_upsert_and_clear(store: Store) -> None:
    store.transact(lambda tx: tx.facts.write_settings("a", Settings(model="x")))
    store.transact(lambda tx: tx.facts.write_settings("a", Settings(model="y", effort="high")))
    assert store.read(lambda tx: tx.facts.read_settings("a")) == Settings(model="y", effort="high")
    store.transact(lambda tx: tx.facts.write_context_tokens("a", 5))
    store.transact(lambda tx: tx.facts.write_context_tokens("a", 7))
    assert store.read(lambda tx: tx.facts.read_context_tokens("a")) == 7
    store.transact(lambda tx: tx.facts.write_context_tokens("a", None))
    assert store.read(lambda tx: tx.facts.read_context_tokens("a")) is None


def test_kv_conditional_writes_report_whether_they_won(store: Store) -> None:
    assert store.transact(lambda tx: tx.kv.write_if_absent("k", {"a": 1, "b": 2}))
    assert not store.transact(lambda tx: tx.kv.write_if_absent("k", 0))
    # Key order does not matter: values compare by canonical encoding.
    assert store.transact(lambda tx: tx.kv.compare_and_set("k", {"b": 2, "a": 1}, 3))
    assert not store.transact(lambda tx: tx.kv.compare_and_set("k", {"a": 1}, 4))
    assert not store.transact(lambda tx: tx.kv.compare_and_set("k", None, 4))
    assert store.transact(lambda tx: tx.kv.delete_if_present("k"))
    assert not store.transact(lambda tx: tx.kv.delete_if_present("k"))
    assert store.transact(lambda tx: tx.kv.compare_and_set("k", None, 5))
    with pytest.raises(ValueError, match="absent"):
        store.transact(lambda tx: tx.kv.write("k", None))


def test_kv_list_and_clear_cover_exactly_the_prefix(store: Store) -> None:
    keys = ["p", "p.a", "p.b", "p/", "q", "o\U0010ffff"]
    store.transact(lambda tx: [tx.kv.write(key, key) for key in keys])
    assert [k for k, _ in store.read(lambda tx: tx.kv.scan("p."))] == ["p.a", "p.b"]
    assert store.transact(lambda tx: tx.kv.clear("p")) == 4
    assert [k for k, _ in store.read(lambda tx: tx.kv.scan(""))] == ["o\U0010ffff", "q"]


def test_foreign_keys_refuse_rows_for_unknown_agents(store: Store) -> None:
    with pytest.raises(StoreConstraintError, match=r"FOREIGN KEY|foreign key"):
        store.transact(lambda tx: tx.records.append("ghost", _user("x")))
    assert store.read(lambda tx: tx.records.count("ghost")) == 0  # nothing written


def test_a_transaction_refuses_use_after_its_work_returned(store: Store) -> None:
    kept: list[Transaction] = []
    store.transact(kept.append)
    assert kept[0].active is False
    with pytest.raises(ExpiredScopeError):
        kept[0].agents.get("a")
    read_kept: list[Transaction] = []
    store.read(read_kept.append)
    with pytest.raises(ExpiredScopeError):
        read_kept[0].agents.live()


def test_read_snapshots_refuse_writes(store: Store) -> None:
    with pytest.raises(ReadOnlyTransactionError):
        store.read(lambda tx: tx.facts.write_context_tokens("a", 1))
    with pytest.raises(ReadOnlyTransactionError):
        store.read(lambda tx: tx.after_commit(lambda: None))
    assert store.read(lambda tx: tx.facts.read_context_tokens("a")) is None
