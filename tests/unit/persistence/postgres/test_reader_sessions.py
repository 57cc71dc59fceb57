"""A store's reader sessions on PostgreSQL are capped: however many reads run at once, at most
``readers`` sessions (the URL's ``readers=N``, default 8) are open, and the others wait for
one to be given back. 256 agents loading at once once took 256 sessions and hit the server's
``max_connections`` ("too many clients"), failing their loads."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import pytest

from agentkeep.errors import InvalidConfigError
from agentkeep.persistence.opening import open_store
from agentkeep.persistence.postgres.connection import DEFAULT_MAX_READERS, parse_url

pytestmark = pytest.mark.backend

WAIT_SECONDS = 30


def _reader_sessions(server: str, store_readers: str) -> int:
    with psycopg.connect(server, autocommit=True) as probe:
        row = probe.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            (store_readers,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_concurrent_reads_never_open_more_sessions_than_the_cap(
    tmp_path: Path, pg_url: str, server: str
) -> None:
    store = open_store(tmp_path / "home", database=pg_url + "&readers=2")
    readers = store._pg.pg_readers  # type: ignore[attr-defined]  # the store's own pool
    name = readers._name
    inside = threading.Semaphore(0)
    release = threading.Event()
    done: list[int] = []

    def read(n: int) -> None:
        def work(tx: object) -> int:
            inside.release()
            assert release.wait(WAIT_SECONDS)
            return n

        done.append(store.read(work))

    threads = [threading.Thread(target=read, args=(n,)) for n in range(5)]
    try:
        for thread in threads:
            thread.start()
        # Two reads hold the two sessions; the other three wait for one.
        assert inside.acquire(timeout=WAIT_SECONDS)
        assert inside.acquire(timeout=WAIT_SECONDS)
        assert not inside.acquire(timeout=0.2)  # a third read cannot start (no ordering)
        assert _reader_sessions(server, name) == 2
        release.set()
        for thread in threads:
            thread.join(WAIT_SECONDS)
        assert sorted(done) == [0, 1, 2, 3, 4]
        assert _reader_sessions(server, name) <= 2
    finally:
        release.set()
        store.close()


def test_the_cap_comes_from_the_url_and_a_bad_one_is_refused(pg_url: str) -> None:
    assert parse_url(pg_url).readers == DEFAULT_MAX_READERS
    assert parse_url(pg_url + "&readers=3").readers == 3
    for bad in ("0", "-1", "x", "1001"):
        with pytest.raises(InvalidConfigError, match="readers"):
            parse_url(pg_url + f"&readers={bad}")


def test_a_read_waiting_for_a_session_is_refused_when_the_store_closes(
    tmp_path: Path, pg_url: str
) -> None:
    from agentkeep.errors import StoreClosedError

    store = open_store(tmp_path / "home", database=pg_url + "&readers=1")
    inside = threading.Event()
    release = threading.Event()
    outcome: list[BaseException | None] = []

    def holder(tx: object) -> None:
        inside.set()
        assert release.wait(WAIT_SECONDS)

    def waiter() -> None:
        try:
            store._pg.pg_readers.read(lambda tx: None)  # type: ignore[attr-defined]
            outcome.append(None)
        except BaseException as error:
            outcome.append(error)

    first = threading.Thread(target=lambda: store.read(holder))
    first.start()
    assert inside.wait(WAIT_SECONDS)
    second = threading.Thread(target=waiter)
    second.start()
    try:
        store._pg.pg_readers.close()  # type: ignore[attr-defined]
        second.join(WAIT_SECONDS)
        assert len(outcome) == 1
        assert isinstance(outcome[0], StoreClosedError)
    finally:
        release.set()
        first.join(WAIT_SECONDS)
        store.close()
