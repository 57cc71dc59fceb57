"""Partitioned ownership on PostgreSQL: a partition's owner holds the store's lock shared and
the partition's exclusive on its writer's session; the owner row per partition carries an
epoch that grows at each new owner; the count is recorded once; a classic owner and partition
owners exclude each other; concurrent opens of one fresh schema do not race."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import pytest

from agentkeep.errors import InvalidConfigError, StoreLockedError, StoreOwnershipLostError
from agentkeep.partitions import Partition, new_id_in
from agentkeep.persistence.opening import open_store
from agentkeep.persistence.postgres import PostgresStore, parse_url
from agentkeep.types.records import AgentRow


def _open(home: Path, url: str, partition: Partition | None = None) -> PostgresStore:
    store = open_store(home, database=url, partition=partition)
    assert isinstance(store, PostgresStore)
    return store


def _owners(url: str) -> dict[int, tuple[str, int]]:
    """``partition -> (application_name, epoch)`` as ``agentkeep_owner`` holds them."""
    target = parse_url(url)
    with psycopg.connect(target.conninfo, autocommit=True) as reader:
        rows = reader.execute(
            f'SELECT partition, application_name, epoch FROM "{target.schema}".agentkeep_owner'
        ).fetchall()
    return {int(p): (str(name), int(epoch)) for p, name, epoch in rows}


def _terminate(server: str, backend_pid: int) -> None:
    with psycopg.connect(server, autocommit=True) as admin:
        row = admin.execute("SELECT pg_terminate_backend(%s, 10000)", (backend_pid,)).fetchone()
    assert row == (True,)


def test_two_partitions_are_owned_at_once_each_with_its_epoch(tmp_path: Path, pg_url: str) -> None:
    with (
        _open(tmp_path / "w0", pg_url, Partition(0, 2)) as first,
        _open(tmp_path / "w1", pg_url, Partition(1, 2)) as second,
    ):
        assert (first.partition, second.partition) == (Partition(0, 2), Partition(1, 2))
        assert (first.epoch, second.epoch) == (1, 1)
        owners = _owners(pg_url)
        assert sorted(owners) == [0, 1]
        assert owners[0][1] == owners[1][1] == 1
        # Each writes through its own session: both commit.
        mine = new_id_in(Partition(1, 2))
        second.transact(lambda tx: tx.agents.create(AgentRow(id=mine, config={}), partition=1))
        first.transact(lambda tx: tx.agents.create(AgentRow(id="zero", config={})))
    # The next owner of each partition stamps the next epoch.
    with _open(tmp_path / "w1", pg_url, Partition(1, 2)) as again:
        assert again.epoch == 2
    assert _owners(pg_url)[1][1] == 2
    assert _owners(pg_url)[0][1] == 1


def test_a_second_owner_of_a_partition_is_refused_naming_the_holder(
    tmp_path: Path, pg_url: str
) -> None:
    with _open(tmp_path / "a", pg_url, Partition(1, 3)) as owner:
        with pytest.raises(StoreLockedError) as refused:
            _open(tmp_path / "b", pg_url, Partition(1, 3))
        assert refused.value.holder is not None
        assert f"backend {owner.backend_pid}" in refused.value.holder
        assert "partition 1" in str(refused.value)
        # Another partition is free, and the refused open stamped nothing.
        with _open(tmp_path / "c", pg_url, Partition(2, 3)):
            pass
        assert _owners(pg_url)[1][1] == 1


def test_a_classic_owner_and_partition_owners_exclude_each_other(
    tmp_path: Path, pg_url: str
) -> None:
    with _open(tmp_path / "classic", pg_url) as classic:
        with pytest.raises(StoreLockedError) as refused:
            _open(tmp_path / "p", pg_url, Partition(0, 2))
        assert refused.value.holder is not None
        assert f"backend {classic.backend_pid}" in refused.value.holder
    with _open(tmp_path / "p", pg_url, Partition(1, 2)) as partitioned:
        with pytest.raises(StoreLockedError) as refused:
            _open(tmp_path / "classic", pg_url)
        assert refused.value.holder is not None
        assert f"backend {partitioned.backend_pid}" in refused.value.holder


def test_the_partition_count_is_recorded_once(tmp_path: Path, pg_url: str) -> None:
    with _open(tmp_path / "a", pg_url) as classic:  # a classic store with an agent already
        classic.transact(lambda tx: tx.agents.create(AgentRow(id="old-agent", config={})))
    with _open(tmp_path / "a", pg_url, Partition(0, 4)):
        pass
    with pytest.raises(InvalidConfigError, match="divided into 4 partitions"):
        _open(tmp_path / "a", pg_url, Partition(0, 8))
    assert _owners(pg_url)[0][1] == 2  # the refused open stamped no epoch
    target = parse_url(pg_url)
    with psycopg.connect(target.conninfo, autocommit=True) as reader:
        row = reader.execute(
            f'SELECT partition FROM "{target.schema}".agents WHERE id = %s', ("old-agent",)
        ).fetchone()
    # The first partitioned open stamped the existing agents' partitions.
    from agentkeep.partitions import partition_of

    assert row == (partition_of("old-agent", 4),)
    with _open(tmp_path / "a", pg_url) as classic:
        assert classic.partition is None
        assert classic.partition_count == 4


def test_systems_opening_one_fresh_schema_at_once_do_not_race(tmp_path: Path, pg_url: str) -> None:
    count = 4
    barrier = threading.Barrier(count)
    opened: dict[int, PostgresStore] = {}
    failures: list[BaseException] = []

    def open_one(index: int) -> None:
        barrier.wait()
        try:
            opened[index] = _open(tmp_path / f"w{index}", pg_url, Partition(index, count))
        except BaseException as error:  # reported below
            failures.append(error)

    threads = [threading.Thread(target=open_one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    try:
        assert failures == []
        assert sorted(opened) == list(range(count))
        assert sorted(_owners(pg_url)) == list(range(count))
    finally:
        for store in opened.values():
            store.close()


def test_a_writer_whose_partition_was_taken_meanwhile_cannot_commit(
    tmp_path: Path, pg_url: str, server: str
) -> None:
    partition = Partition(1, 2)
    mine = new_id_in(partition)
    with _open(tmp_path / "first", pg_url, partition) as first:
        first.transact(lambda tx: tx.agents.create(AgentRow(id=mine, config={}), partition=1))
        _terminate(server, first.backend_pid)  # its lock goes with its session
        with _open(tmp_path / "thief", pg_url, partition) as thief:
            assert thief.epoch == 2
            with pytest.raises(StoreOwnershipLostError, match="partition 1 of 2"):
                first.transact(lambda tx: tx.agents.update_metadata(mine, {"late": True}))
        # Gone and let go again: still lost (the row names the thief), never a silent retake.
        with pytest.raises(StoreOwnershipLostError):
            first.transact(lambda tx: tx.agents.update_metadata(mine, {"late": True}))
    with _open(tmp_path / "check", pg_url) as reader:
        row = reader.read(lambda tx: tx.agents.get(mine))
        assert row is not None
        assert "late" not in row.metadata


def test_a_dropped_partition_session_is_replaced_with_both_locks_taken_again(
    tmp_path: Path, pg_url: str, server: str
) -> None:
    with _open(tmp_path / "p", pg_url, Partition(0, 2)) as owner:
        owner.transact(lambda tx: tx.agents.create(AgentRow(id="a", config={})))
        before = owner.backend_pid
        _terminate(server, before)
        owner.transact(lambda tx: tx.agents.create(AgentRow(id="b", config={})))
        assert owner.backend_pid != before
        assert owner.epoch == 1  # the same owner: no new epoch
        with pytest.raises(StoreLockedError):
            _open(tmp_path / "q", pg_url, Partition(0, 2))
        with pytest.raises(StoreLockedError):
            _open(tmp_path / "classic", pg_url)


def test_an_earlier_ownership_row_becomes_partition_zero(tmp_path: Path, pg_url: str) -> None:
    target = parse_url(pg_url)
    with psycopg.connect(target.conninfo, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA IF NOT EXISTS "{target.schema}"')
        admin.execute(
            f'CREATE TABLE "{target.schema}".agentkeep_owner (id INTEGER PRIMARY KEY '
            "CHECK (id = 1), token TEXT NOT NULL, pid BIGINT NOT NULL, "
            "application_name TEXT NOT NULL, since_ms BIGINT NOT NULL)"
        )
        admin.execute(
            f"INSERT INTO \"{target.schema}\".agentkeep_owner VALUES (1, 'old', 1, 'old', 0)"
        )
    with _open(tmp_path / "a", pg_url) as store:
        assert store.epoch == 2  # the earlier owner was the first
    assert list(_owners(pg_url)) == [0]
    with _open(tmp_path / "a", pg_url, Partition(1, 2)) as store:
        assert store.epoch == 1
