"""AgentSystems that each own one partition of one PostgreSQL store: they turn at once on
their own agents, read the whole store, refuse every write for the other's agents (nothing
written), and a killed partition's owed work is resumed by the next owner at the next epoch."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

import agentkeep as ak
from agentkeep.errors import PartitionNotOwnedError, StoreLockedError, StoreOwnershipLostError
from agentkeep.modules import ModuleContext
from agentkeep.partitions import Partition, new_id_in, partition_of
from agentkeep.persistence.postgres import PostgresStore, parse_url
from agentkeep.persistence.postgres.ownership import lock_key
from agentkeep.server import RunningServer, ServeOptions

TOKEN = "test-token-0123456789-abcdefghijklmnop"
ANSWERED = ["UserMessage", "AssistantMessage"]


def _kinds(transcript: list[ak.Message]) -> list[str]:
    return [type(message).__name__ for message in transcript]


def _open(home: Path, url: str, partition: Partition | None, **options: object) -> ak.AgentSystem:
    providers = ak.Providers()
    providers.add("demo", ak.DemoModel(), kind="gym")
    return ak.AgentSystem.open(
        home,
        providers=providers,
        provider="demo",
        model="demo-1",
        database=url,
        partition=partition,
        **options,  # type: ignore[arg-type]
    )


def _store(system: ak.AgentSystem) -> PostgresStore:
    store = system.internals.store
    assert isinstance(store, PostgresStore)
    return store


@pytest.fixture
def pair(tmp_path: Path, pg_url: str) -> Iterator[tuple[ak.AgentSystem, ak.AgentSystem]]:
    first = _open(tmp_path / "w0", pg_url, Partition(0, 2))
    try:
        second = _open(tmp_path / "w1", pg_url, Partition(1, 2))
    except BaseException:
        first.close()
        raise
    try:
        yield first, second
    finally:
        second.close()
        first.close()


def _stored_partitions(url: str) -> dict[str, int]:
    target = parse_url(url)
    with psycopg.connect(target.conninfo, autocommit=True) as reader:
        rows = reader.execute(f'SELECT id, partition FROM "{target.schema}".agents').fetchall()
    return {str(agent_id): int(partition) for agent_id, partition in rows}


def test_two_partitions_systems_turn_at_once_on_their_own_agents(
    pair: tuple[ak.AgentSystem, ak.AgentSystem], pg_url: str
) -> None:
    first, second = pair
    assert (first.partition, second.partition) == (Partition(0, 2), Partition(1, 2))
    mine = {0: [first.create() for _ in range(3)], 1: [second.create() for _ in range(3)]}
    child = first.create(parent=mine[0][0].id)  # a child lands in its parent's partition
    for index, agents in mine.items():
        assert all(partition_of(agent.id, 2) == index for agent in agents)
    assert partition_of(child.id, 2) == 0
    everyone = [*mine[0], *mine[1]]
    for agent in everyone:  # both systems' agents turn at the same time
        agent.send(ak.user("hello"))
    for agent in everyone:
        assert agent.wait_for_idle(timeout_seconds=60)
    ids = {agent.id for agent in everyone} | {child.id}
    # Reads see the whole store, from either system.
    assert {info.id for info in first.agents()} == {info.id for info in second.agents()} == ids
    for agent in everyone:
        for reader in (first, second):
            assert _kinds(reader.transcript(agent.id)) == ANSWERED
            assert "turn.completed" in [event.type for event in reader.events(agent.id)]
    stored = _stored_partitions(pg_url)
    assert stored == {agent_id: partition_of(agent_id, 2) for agent_id in ids}
    # Each system ran only its own agents.
    assert set(first.internals.live_agents()) <= {a.id for a in mine[0]} | {child.id}
    assert set(second.internals.live_agents()) <= {a.id for a in mine[1]}


def test_a_write_for_the_other_partitions_agent_is_refused_and_nothing_is_written(
    pair: tuple[ak.AgentSystem, ak.AgentSystem], pg_url: str
) -> None:
    first, second = pair
    theirs = first.create(ak.AgentConfig(metadata={"title": "zero"}))
    theirs.send(ak.user("hello"))
    assert theirs.wait_for_idle(timeout_seconds=60)
    first.registry.create({"id": "helper", "name": "Helper"})
    events = first.events(theirs.id, limit=1000)
    writes = {
        "send": lambda: second.send(theirs.id, ak.user("no")),
        "steer": lambda: second.steer(theirs.id, ak.user("no")),
        "abort": lambda: second.abort(theirs.id),
        "compact": lambda: second.compact(theirs.id),
        "delete": lambda: second.delete(theirs.id),
        "metadata": lambda: second.update_metadata(theirs.id, {"title": "one"}),
        "base state": lambda: second.update_base_state(theirs.id, instructions="x"),
        "start": lambda: second.start(theirs.id),
        "create with its id": lambda: second.create(id=new_id_in(Partition(0, 2))),
        "create a child of it": lambda: second.create(parent=theirs.id),
        "purge": lambda: second.resolve(theirs.id).purge_archived(),
        "archive": lambda: second.sessions.archive(theirs.id),
        "settle": lambda: second.sessions.settle(theirs.id),
        "cancel": lambda: second.sessions.cancel(theirs.id),
        "turn": lambda: second.sessions.send(theirs.id, ak.user("no")),
        "kv": lambda: second.transaction(lambda t: t.agent_kv(theirs.id, "notes").put("k", 1)),
        "session": lambda: second.sessions.start("helper", id=new_id_in(Partition(0, 2))),
        "registry create": lambda: second.registry.create({"id": "other"}),
        "registry update": lambda: second.registry.update("helper", {"name": "x"}),
        "registry delete": lambda: second.registry.delete("helper"),
    }
    for name, write in writes.items():
        with pytest.raises(PartitionNotOwnedError) as refused:
            write()
        assert refused.value.code == "not_owner", name
        assert refused.value.owned == 1, name
    assert first.events(theirs.id, limit=1000) == events
    assert first.metadata(theirs.id) == {"title": "zero"}
    assert [info.id for info in second.agents()] == [theirs.id]
    assert second.internals.live_agents() == []
    assert [d.id for d in first.registry.list()] == ["helper"]
    assert [revision.number for revision in first.registry.revisions("helper")] == [1]
    assert set(_stored_partitions(pg_url)) == {theirs.id}


def test_rest_on_the_wrong_partition_is_a_421_not_owner(
    pair: tuple[ak.AgentSystem, ak.AgentSystem],
) -> None:
    first, second = pair
    theirs = first.create()
    server = RunningServer(second, ServeOptions(port=0, token=TOKEN)).start()
    try:
        with httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
        ) as client:
            refused = client.post(f"/v1/sessions/{theirs.id}/messages", json={"message": "hi"})
            assert refused.status_code == 421
            body = refused.json()
            assert body["error"]["code"] == "not_owner"
            assert body["error"]["details"]["partition"] == 0
            # Reads answer from any partition's system.
            assert client.get(f"/v1/sessions/{theirs.id}/events").status_code == 200
    finally:
        server.stop()
    assert first.events(theirs.id) == []


_OWNER = """
import sys
import agentkeep as ak
from agentkeep.partitions import Partition
home, url = sys.argv[1], sys.argv[2]
providers = ak.Providers()
providers.add("demo", ak.DemoModel(), kind="gym")
system = ak.AgentSystem.open(home, providers=providers, provider="demo", model="demo-1",
                             database=url, partition=Partition(1, 2))
agent = system.create()
# Durable, owed, and not started: the work this process owes when it is killed.
system.internals.accept(agent.id, "send", ak.user("hello"), start=False)
print("owes", agent.id, system.internals.store.epoch, flush=True)
sys.stdin.read()
"""


def _wait_until_partition_free(url: str, index: int) -> None:
    """Block (no sleeping) until the server has ended the killed holder's session."""
    target = parse_url(url)
    with psycopg.connect(target.conninfo, autocommit=True) as waiter:
        waiter.execute("SET lock_timeout = '20s'")
        oid = lock_key(waiter, target.schema) & 0xFFFFFFFF
        waiter.execute("SELECT pg_advisory_lock(%s, %s)", (oid, index))
        waiter.execute("SELECT pg_advisory_unlock(%s, %s)", (oid, index))


def test_a_killed_partitions_owed_work_is_resumed_by_the_next_owner(
    tmp_path: Path, pg_url: str
) -> None:
    with _open(tmp_path / "w0", pg_url, Partition(0, 2)) as other:
        child = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(_OWNER), str(tmp_path / "w1"), pg_url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None
            line = next(line for line in iter(child.stdout.readline, "") if line.startswith("owes"))
            _, agent_id, epoch = line.split()
            assert partition_of(agent_id, 2) == 1
            with pytest.raises(StoreLockedError):
                _open(tmp_path / "w2", pg_url, Partition(1, 2))
            child.send_signal(signal.SIGKILL)
            assert child.wait(timeout=30) == -signal.SIGKILL
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            for stream in (child.stdin, child.stdout):
                if stream is not None:
                    stream.close()
        # The other partition's system never ran it: it is partition 1's work.
        assert agent_id not in other.internals.live_agents()
        assert agent_id not in other.start()
        assert other.transcript(agent_id) == []  # queued, not consumed
        _wait_until_partition_free(pg_url, 1)
        with _open(tmp_path / "w2", pg_url, Partition(1, 2)) as heir:
            assert _store(heir).epoch == int(epoch) + 1
            assert heir.wait_for_idle(agent_id, timeout_seconds=60)
            assert _kinds(heir.transcript(agent_id)) == ANSWERED
        assert _kinds(other.transcript(agent_id)) == ANSWERED


def test_a_system_whose_partition_was_taken_meanwhile_cannot_write(
    tmp_path: Path, pg_url: str, server: str
) -> None:
    with _open(tmp_path / "w1", pg_url, Partition(1, 2)) as first:
        agent = first.create()
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s, 10000)", (_store(first).backend_pid,))
        with _open(tmp_path / "w2", pg_url, Partition(1, 2)) as thief:
            assert _store(thief).epoch == _store(first).epoch + 1
            assert not _store(first).lost.is_set()
            assert first.lost is None
            with pytest.raises(StoreOwnershipLostError):
                first.update_metadata(agent.id, {"late": True})
            assert _store(first).lost.is_set()
            # The public way a worker's runner tells (PartitionHandle.lost).
            assert first.lost == "ownership_lost"
            assert not _store(thief).lost.is_set()
            assert thief.lost is None
            assert thief.metadata(agent.id) == {}


def test_partitions_systems_opening_a_fresh_schema_together_migrate_once(
    tmp_path: Path, pg_url: str
) -> None:
    runs: list[str] = []

    def create(ctx: ModuleContext) -> None:
        runs.append("v1")
        ctx.db.execute("CREATE TABLE notes_items (body TEXT)")
        ctx.db.execute("INSERT INTO notes_items (body) VALUES (?)", ("first",))

    count = 3
    barrier = threading.Barrier(count)
    opened: dict[int, ak.AgentSystem] = {}
    failures: list[BaseException] = []

    def open_one(index: int) -> None:
        module = ak.Module("notes", migrations=[("v1", create)])
        barrier.wait()
        try:
            opened[index] = _open(
                tmp_path / f"w{index}", pg_url, Partition(index, count), modules=[module]
            )
        except BaseException as error:  # reported below
            failures.append(error)

    threads = [threading.Thread(target=open_one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    try:
        assert failures == []
        assert sorted(opened) == list(range(count))
        assert runs == ["v1"]
        store = opened[0].internals.store
        assert store.read(lambda tx: tx.sql.query("SELECT body FROM notes_items")) == [("first",)]
    finally:
        for system in opened.values():
            system.close()
