"""Archived history through a real store: copied whole into numbered epochs, read back in
order, deleted only by a purge (which never reuses a number), wiped with a re-created id."""

from __future__ import annotations

import pytest

from agentkeep.persistence import ReadOnlyTransactionError, Store
from agentkeep.types import Settings, TextBlock, UserMessage
from agentkeep.types.records import AgentRow, UserRecord


def _user(text: str) -> UserRecord:
    return UserRecord(message_id=text, message=UserMessage(content=(TextBlock(text=text),)))


def _texts(records: tuple[object, ...]) -> list[str]:
    return [r.message_id for r in records if isinstance(r, UserRecord)]


def test_archive_copies_a_prefix_or_everything_into_numbered_epochs(store: Store) -> None:
    for text in ("1", "2", "3"):
        store.transact(lambda tx, text=text: tx.records.append("a", _user(text)))
    selection = Settings(provider="local", model="gym-1")

    first = store.transact(
        lambda tx: tx.archive.add_epoch("a", 2, reason="compaction", settings=selection)
    )
    second = store.transact(
        lambda tx: tx.archive.add_epoch("a", None, reason="model_switch", settings=None)
    )

    assert (first, second) == (1, 2)
    epochs = store.read(lambda tx: tx.archive.epochs("a"))
    assert [(e.epoch, e.reason, e.settings) for e in epochs] == [
        (1, "compaction", selection),
        (2, "model_switch", None),
    ]
    assert [_texts(e.records) for e in epochs] == [["1", "2"], ["1", "2", "3"]]
    assert store.read(lambda tx: tx.records.count("a")) == 3  # archiving copies; it never deletes
    # Nothing to archive archives nothing.
    assert (
        store.transact(lambda tx: tx.archive.add_epoch("a", 0, reason="compaction", settings=None))
        is None
    )


def test_purge_deletes_the_archive_only_and_numbers_are_not_reused(store: Store) -> None:
    store.transact(lambda tx: tx.records.append("a", _user("1")))
    store.transact(lambda tx: tx.archive.add_epoch("a", None, reason="model_switch", settings=None))

    assert store.transact(lambda tx: tx.archive.purge("a")) == (1, 1)

    assert store.read(lambda tx: tx.archive.epochs("a")) == []
    assert store.read(lambda tx: tx.records.count("a")) == 1
    assert store.read(lambda tx: tx.archive.last_epoch("a")) == 1
    again = store.transact(
        lambda tx: tx.archive.add_epoch("a", None, reason="model_switch", settings=None)
    )
    assert again == 2
    with pytest.raises(ReadOnlyTransactionError):
        store.read(lambda tx: tx.archive.purge("a"))


def test_a_re_created_id_starts_without_the_old_archive(store: Store) -> None:
    store.transact(lambda tx: tx.records.append("a", _user("1")))
    store.transact(lambda tx: tx.archive.add_epoch("a", None, reason="model_switch", settings=None))
    store.transact(lambda tx: tx.agents.delete("a"))
    assert store.read(lambda tx: len(tx.archive.epochs("a"))) == 1  # a delete keeps it

    store.transact(lambda tx: tx.agents.create(AgentRow(id="a", config={})))

    assert store.read(lambda tx: tx.archive.epochs("a")) == []
    assert store.read(lambda tx: tx.archive.last_epoch("a")) == 0
