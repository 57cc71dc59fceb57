"""The incremental provider view: ``ProviderViews.view(records)`` is always exactly
``provider_view(records)``, and a conversation that grows by plain turns is read only from
where the kept prefix ends (the cost of a step no longer grows with the history)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from agentkeep.loop import view as views
from agentkeep.loop.view import OpenCalls, ProviderViews, provider_view, unanswered_calls
from agentkeep.types import (
    AssistantMessage,
    SystemMessage,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
)
from agentkeep.types.records import (
    BlockRecord,
    CompactionRecord,
    ConversationRecord,
    SystemRecord,
    ToolRecord,
    UserRecord,
)


def _user(n: int) -> UserRecord:
    return UserRecord(message_id=f"m{n}", message=UserMessage(content=(TextBlock(text=f"u{n}"),)))


def _text(n: int) -> BlockRecord:
    return BlockRecord(block=TextBlock(text=f"a{n}"))


def _call(call_id: str) -> BlockRecord:
    return BlockRecord(block=ToolCallBlock(call_id=call_id, name="t", arguments="{}"))


def _result(call_id: str) -> ToolRecord:
    return ToolRecord(
        message=ToolResultMessage(call_id=call_id, content=(TextBlock(text=f"r{call_id}"),))
    )


def _grow(
    rng: random.Random, records: list[ConversationRecord], calls: list[str], n: int
) -> list[ConversationRecord]:
    """One random change of the conversation: mostly appends, sometimes a compaction (a new
    list), a result out of order, a stray or repeated result, a note."""
    roll = rng.random()
    if roll < 0.25:
        records.append(_user(n))
    elif roll < 0.45:
        records.append(_text(n))
    elif roll < 0.6:
        call_id = f"c{n}"
        calls.append(call_id)
        records.append(_call(call_id))
    elif roll < 0.8 and calls:
        records.append(_result(rng.choice(calls)))  # in order, late, or a repeat
    elif roll < 0.85:
        records.append(_result(f"stray{n}"))
    elif roll < 0.9:
        note = SystemMessage(content=(TextBlock(text=f"n{n}"),))
        records.append(SystemRecord(message=note))
    elif roll < 0.95:
        kept = records[rng.randrange(len(records) + 1) :] if records else []
        summary = AssistantMessage(content=(TextBlock(text=f"summary {n}"),))
        kept = [r for r in kept if not isinstance(r, CompactionRecord)]
        return [CompactionRecord(messages=(summary,)), *kept]
    else:
        return list(records)  # a reload: equal records, new objects
    return records


@pytest.mark.parametrize("seed", range(60))
def test_the_incremental_view_is_always_the_whole_view(seed: int) -> None:
    rng = random.Random(seed)
    cache = ProviderViews()
    records: list[ConversationRecord] = []
    calls: list[str] = []
    for n in range(120):
        records = _grow(rng, records, calls, n)
        assert cache.view(records) == provider_view(records), f"seed {seed}, step {n}"


def test_plain_turns_read_only_the_records_after_the_kept_prefix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read: list[int] = []
    whole = views._view

    def counting(records: list[ConversationRecord]) -> views._Part:
        read.append(len(records))
        return whole(records)

    monkeypatch.setattr(views, "_view", counting)
    cache = ProviderViews()
    records: list[ConversationRecord] = []
    for n in range(200):
        records.append(_user(n))
        assert cache.view(records) == provider_view(records)
        records.append(_text(n))
    # provider_view above reads everything; the cache's own reads are each one turn long
    cached_reads = read[::2]
    assert cached_reads[0] == 1
    assert max(cached_reads[1:]) == 2  # the last answer and the new message


@pytest.mark.parametrize("seed", range(60))
def test_the_incremental_open_calls_are_always_the_whole_scan(seed: int) -> None:
    rng = random.Random(seed)
    cache = OpenCalls()
    records: list[ConversationRecord] = []
    calls: list[str] = []
    for n in range(120):
        records = _grow(rng, records, calls, n)
        assert cache.calls(records) == unanswered_calls(records), f"seed {seed}, step {n}"


def test_open_calls_of_a_growing_conversation_read_only_the_new_records(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read: list[int] = []
    scan = views._scan_calls

    def counting(calls: dict[str, ToolCallBlock], records: list[ConversationRecord]) -> None:
        read.append(len(records))
        scan(calls, records)

    monkeypatch.setattr(views, "_scan_calls", counting)
    cache = OpenCalls()
    records: list[ConversationRecord] = []
    for n in range(200):
        records += [_user(n), _call(f"c{n}"), _result(f"c{n}"), _text(n)]
        assert cache.calls(records) == []
    assert read == [4] * 200


def test_a_trailing_compaction_is_continued_as_it_stands_without_the_continue_notice() -> None:
    """The rule: "A trailing native compaction is continued as it stands" — only the model's
    own completed blocks at the end call for "Continue from where you left off.", even when
    the compaction's replacement itself ends with an assistant message."""
    summary = AssistantMessage(content=(TextBlock(text="the summary"),))
    compaction = CompactionRecord(messages=(summary,), owes_answer=True)
    assert not views.ends_with_own_message([compaction])
    assert views.ends_with_own_message([_user(1), _text(1)])
    assert not views.ends_with_own_message([_user(1), _text(1), _user(2)])
    assert not views.ends_with_own_message([])


class _Touches(list[ConversationRecord]):
    """The loop's records, counting the elements each read touches (a slice, an iteration)."""

    def __init__(self) -> None:
        super().__init__()
        self.touched: list[int] = []

    def __getitem__(self, index: Any) -> Any:
        got = super().__getitem__(index)
        self.touched.append(len(got) if isinstance(index, slice) else 1)
        return got

    def __iter__(self) -> Iterator[ConversationRecord]:
        self.touched.append(len(self))
        return super().__iter__()


def test_the_caches_never_reread_the_prefix_of_records_that_grew_in_place() -> None:
    # Checking that the records are the ones seen, extended, took a copy of the
    # whole prefix and compared it (and keeping them another copy) on every call, so a
    # step's cost still grew with the history. The list seen, only extended in place, is
    # recognised in constant time; only the new records are read.
    records = _Touches()
    views_cache, calls_cache = ProviderViews(), OpenCalls()
    for n in range(300):
        records.extend([_user(n), _call(f"c{n}"), _result(f"c{n}"), _text(n)])
        records.touched.clear()
        assert calls_cache.calls(records) == []
        views_cache.view(records)
        assert max(records.touched) <= 4, f"turn {n}: read {records.touched}"
    assert views_cache.view(records) == provider_view(list(records))


def test_a_new_list_is_read_whole_even_with_the_same_records() -> None:
    records: list[ConversationRecord] = [_user(0), _call("c0")]
    cache = OpenCalls()
    assert [c.call_id for c in cache.calls(records)] == ["c0"]
    answered = [*records, _result("c0")]  # a reload: a new list
    assert cache.calls(answered) == []
    assert [c.call_id for c in cache.calls(records)] == ["c0"]  # and back: the list it is
