"""``agentkeep.partitions``: the stable hash of an agent's id to its partition, and
``Partition``'s checks (backend-free: nothing here touches a store)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

import agentkeep as ak
from agentkeep.errors import InvalidConfigError, PartitionNotOwnedError
from agentkeep.partitions import CLASSIC, MAX_PARTITIONS, Partition, new_id_in, partition_of


def test_partition_of_is_pinned_and_independent_of_the_process() -> None:
    # Pinned values: changing the hash would move every stored agent to another partition.
    assert [partition_of(agent_id, 16) for agent_id in ("a", "agent-1", "z" * 128)] == [15, 10, 12]
    assert [partition_of("agent-1", count) for count in (2, 3, 7, 4096)] == [0, 2, 4, 1098]
    assert partition_of("abc", 16) == 9
    assert partition_of("abc", 1) == 0
    script = "from agentkeep.partitions import partition_of; print(partition_of('abc', 16))"
    # Another interpreter (its own PYTHONHASHSEED) agrees: not Python's salted hash.
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": str(Path(sys.executable).parent)},
        )
        assert out.stdout.strip() == "9"


def test_ids_spread_over_every_partition() -> None:
    counts = [0] * 8
    for number in range(4000):
        counts[partition_of(f"agent-{number}", 8)] += 1
    assert min(counts) > 400  # 500 each on average


def test_a_partition_checks_its_index_and_count() -> None:
    assert Partition(3, 16).index == 3
    assert Partition(0, 1) == CLASSIC
    for index, count in ((2, 2), (-1, 4), (0, 0), (0, MAX_PARTITIONS + 1), (True, 2)):
        with pytest.raises(InvalidConfigError):
            Partition(index, count)
    assert msgspec.json.decode(b'{"index":1,"count":4}', type=Partition) == Partition(1, 4)
    assert ak.Partition is Partition


def test_new_ids_are_drawn_in_the_partition_and_others_are_refused() -> None:
    partition = Partition(2, 5)
    for _ in range(20):
        assert partition_of(new_id_in(partition), 5) == 2
    stranger = next(f"x{n}" for n in range(100) if partition_of(f"x{n}", 5) != 2)
    with pytest.raises(PartitionNotOwnedError) as refused:
        partition.check(stranger)
    error = refused.value
    assert error.code == "not_owner"
    assert (error.agent_id, error.partition, error.owned, error.count) == (
        stranger,
        partition_of(stranger, 5),
        2,
        5,
    )
    with pytest.raises(PartitionNotOwnedError, match="registry"):
        partition.check_registry()
    Partition(0, 5).check_registry()


def test_a_partition_is_refused_on_sqlite(tmp_path: Path) -> None:
    providers = ak.Providers()
    with pytest.raises(InvalidConfigError, match="PostgreSQL"):
        ak.AgentSystem.open(tmp_path, providers=providers, partition=Partition(0, 2))
    with pytest.raises(InvalidConfigError, match=r"ak\.Partition"):
        ak.AgentSystem.open(
            tmp_path,
            providers=providers,
            database="postgresql://nowhere/x",
            partition=(0, 2),  # type: ignore[typeddict-item]
        )
    assert not (tmp_path / "agents.db").exists()  # refused before the store was touched
