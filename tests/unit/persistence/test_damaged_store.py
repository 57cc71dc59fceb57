"""A damaged database is refused before anything is written into it."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from agentkeep.errors import StoreDamagedError, StoreDirectoryError, StoreError
from agentkeep.persistence import DATABASE_NAME, Store
from agentkeep.persistence.readonly import ReadOnlyStore

from .damage import flip_bytes, make_store, truncate

pytestmark = pytest.mark.sqlite_only("damage written into the SQLite database file")

DAMAGE: list[Callable[[Path], None]] = [
    truncate,
    flip_bytes,  # the root page's type: SQLite raises "malformed"
    lambda database: flip_bytes(database, offset=5),  # quick_check lists the page
]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    "damage", DAMAGE, ids=["truncated", "byte_flipped", "byte_flipped_quietly"]
)
def test_opening_a_damaged_store_refuses_writes_and_leaves_the_file_as_it_was(
    tmp_path: Path, damage: Callable[[Path], None]
) -> None:
    database = make_store(tmp_path)
    damage(database)
    before = digest(database)

    with pytest.raises(StoreDamagedError) as raised:
        Store.open(tmp_path)

    error = raised.value
    assert error.code == "store_damaged"
    assert error.path == str(database)
    assert error.findings  # what SQLite reported
    assert str(database) in str(error)
    assert digest(database) == before  # not even a WAL header was written
    assert not Path(f"{database}-wal").exists() or Path(f"{database}-wal").stat().st_size == 0
    # The lock was released: the refusal did not leave the store wedged.
    with pytest.raises(StoreDamagedError):
        Store.open(tmp_path)


def test_a_healthy_store_opens_after_the_check(tmp_path: Path) -> None:
    make_store(tmp_path)
    with Store.open(tmp_path) as store:
        assert [row.id for row in store.read(lambda tx: tx.agents.live())] == [
            "agent0",
            "agent1",
            "agent2",
        ]


def test_a_file_that_is_not_a_database_is_damaged(tmp_path: Path) -> None:
    (tmp_path / DATABASE_NAME).write_bytes(b"not a database at all " * 300)
    with pytest.raises(StoreDamagedError, match="not a database"):
        Store.open(tmp_path)
    with pytest.raises(StoreDamagedError, match="not a database"):
        ReadOnlyStore.open(tmp_path)


def test_a_home_that_is_a_file_is_a_clear_error(tmp_path: Path) -> None:
    home = tmp_path / "file"
    home.write_text("x")
    with pytest.raises(StoreDirectoryError, match="is a file, not a directory") as raised:
        Store.open(home)
    assert raised.value.path == str(home)
    with pytest.raises(StoreDirectoryError, match="a parent of it is a file"):
        Store.open(home / "below")
    with pytest.raises(StoreDirectoryError, match="is a file, not a directory"):
        ReadOnlyStore.open(home)
    assert isinstance(raised.value, StoreError)
