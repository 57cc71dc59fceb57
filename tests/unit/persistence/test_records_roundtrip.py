"""Every record type round-trips through the store's JSON codec unchanged."""

from __future__ import annotations

import typing
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentkeep.persistence import Store
from agentkeep.persistence.codec import encode as _encode
from agentkeep.types import DataBlock, Settings, ToolCallRequestBlock
from agentkeep.types.records import (
    RECORD_TYPES,
    AgentRow,
    ConversationRecord,
    OwedWork,
    PendingToolCall,
    QueuedMessage,
)

json_leaves = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
json_values = st.recursive(
    json_leaves,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)
json_objects = st.dictionaries(st.text(max_size=5), json_values, max_size=4)

# A user message's tool request carries a JSON object (``dict[str, Any]``), which ``from_type``
# cannot draw inside a message: say how.
st.register_type_strategy(
    ToolCallRequestBlock,
    st.builds(
        ToolCallRequestBlock,
        name=st.text(max_size=8),
        arguments=json_objects,
        namespace=st.none() | st.text(max_size=8),
    ),
)
# A data block (the wire's data part) carries any JSON value.
st.register_type_strategy(
    DataBlock,
    st.builds(DataBlock, name=st.text(max_size=8), data=json_values),
)


def _mentions_any(hint: Any) -> bool:
    return hint is Any or any(_mentions_any(arg) for arg in typing.get_args(hint))


# SQLite and msgspec both stop at 64-bit integers.
_int64 = st.integers(-(2**63), 2**63 - 1)


def records_of(record_type: type[Any]) -> st.SearchStrategy[Any]:
    """``st.builds`` with every field drawn: JSON-object fields get a JSON strategy, the
    rest are inferred from their types (``from_type`` cannot draw ``Any``)."""
    hints = typing.get_type_hints(record_type)
    fields: dict[str, Any] = {}
    for field in msgspec.structs.fields(record_type):
        hint = hints[field.name]
        if field.name in {"id", "parent_id", "internal_id"} and hint in (str, str | None):
            # Ids are kept in plain text columns, and every id is one the API validated
            # (InvalidIdError) or minted: PostgreSQL text cannot hold what an arbitrary
            # string may (NUL). Strings inside JSON columns stay arbitrary.
            ids = st.from_regex(r"[a-z][a-z0-9]{1,8}", fullmatch=True)
            fields[field.name] = ids if hint is str else st.none() | ids
        elif _mentions_any(hint):
            fields[field.name] = json_objects | st.none() if field.default is None else json_objects
        else:
            if hint is int:
                fields[field.name] = _int64
            elif hint == int | None:
                fields[field.name] = st.none() | _int64
            else:
                fields[field.name] = st.from_type(hint)
    return st.builds(record_type, **fields)


@pytest.mark.parametrize("record_type", RECORD_TYPES, ids=lambda t: t.__name__)
def test_every_record_type_round_trips_through_json(record_type: type[Any]) -> None:
    decode = msgspec.json.Decoder(record_type).decode

    @settings(max_examples=40, deadline=None)
    @given(records_of(record_type))
    def round_trip(value: Any) -> None:
        assert decode(_encode(value)) == value

    round_trip()


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    with Store.open(tmp_path_factory.mktemp("records")) as store:
        store.transact(lambda tx: tx.agents.create(AgentRow(id="a", config={})))
        yield store


_conversation = st.one_of(
    *(records_of(t) for t in typing.get_args(ConversationRecord))  # the exact union
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    record=_conversation,
    message=records_of(QueuedMessage),
    call=records_of(PendingToolCall),
    settings_=records_of(Settings),
    owed=records_of(OwedWork),
)
def test_domain_values_round_trip_through_the_store(
    shared_store: Store,
    record: Any,
    message: QueuedMessage,
    call: PendingToolCall,
    settings_: Settings,
    owed: OwedWork,
) -> None:
    def work(tx: Any) -> tuple[Any, ...]:
        tx.records.rewrite("a", [])
        tx.records.append("a", record)
        for queued in tx.queue.messages("a"):
            tx.queue.dequeue("a", queued.queue, queued.seq)
        stored = tx.queue.enqueue("a", message)
        for pending in tx.calls.pending("a"):
            tx.calls.remove("a", pending.internal_id)
        tx.calls.put("a", [call])
        tx.facts.write_settings("a", settings_)
        tx.facts.write_owed("a", owed)
        return stored, (
            tx.records.load("a"),
            tx.queue.messages("a"),
            tx.calls.pending("a"),
            tx.facts.read_settings("a"),
            tx.facts.read_owed("a"),
        )

    stored, loaded = shared_store.transact(work)
    assert loaded == ([record], [stored], [call], settings_, owed)
    assert stored == msgspec.structs.replace(message, seq=stored.seq)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(row=records_of(AgentRow))
def test_agent_rows_round_trip_through_the_store(shared_store: Store, row: AgentRow) -> None:
    def work(tx: Any) -> Any:
        tx.agents.delete(row.id)
        # A parent must exist; round-trip the link only to the known agent.
        fresh = msgspec.structs.replace(row, parent_id="a" if row.parent_id else None)
        tx.agents.create(fresh)
        return fresh, tx.agents.get(row.id)

    if row.id == "a":
        return
    fresh, loaded = shared_store.transact(work)
    expected = msgspec.structs.replace(
        fresh, created_at_ms=loaded.created_at_ms, deleted_at_ms=None
    )
    assert loaded == expected
