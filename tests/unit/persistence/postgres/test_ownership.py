"""Exclusive ownership on PostgreSQL: the session-level advisory lock on the writer's session.

A second owner is refused naming the holder; SIGKILL of the owning process releases the lock
(the server ends its session); a dropped connection is replaced only with the lock taken
again, and a writer whose store another owner took (or took and let go) stops for good."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg
import pytest

from agentkeep.errors import StoreLockedError, StoreOwnershipLostError
from agentkeep.persistence.opening import open_store
from agentkeep.persistence.postgres import PostgresStore, parse_url
from agentkeep.persistence.postgres.ownership import lock_key
from agentkeep.types.records import AgentRow


def _open(tmp_path: Path, url: str) -> PostgresStore:
    store = open_store(tmp_path / "state", database=url)
    assert isinstance(store, PostgresStore)
    return store


def _terminate(server: str, backend_pid: int) -> None:
    """End ``backend_pid``'s session from another connection, and wait until it is gone."""
    with psycopg.connect(server, autocommit=True) as admin:
        row = admin.execute("SELECT pg_terminate_backend(%s, 10000)", (backend_pid,)).fetchone()
    assert row == (True,)


def _wait_until_free(url: str) -> None:
    """Block (no sleeping) until the server has ended the last holder's session."""
    target = parse_url(url)
    with psycopg.connect(target.conninfo, autocommit=True) as waiter:
        waiter.execute("SET lock_timeout = '20s'")
        key = lock_key(waiter, target.schema)
        waiter.execute("SELECT pg_advisory_lock(%s)", (key,))
        waiter.execute("SELECT pg_advisory_unlock(%s)", (key,))


def _create(store: PostgresStore, agent_id: str) -> None:
    store.transact(lambda tx: tx.agents.create(AgentRow(id=agent_id, config={})))


def test_a_second_owner_is_refused_naming_the_holder(tmp_path: Path, pg_url: str) -> None:
    with _open(tmp_path, pg_url) as first:
        with pytest.raises(StoreLockedError) as refused:
            open_store(tmp_path / "other", database=pg_url)
        assert refused.value.holder_pid == os.getpid()
        assert refused.value.holder is not None
        assert f"backend {first.backend_pid}" in refused.value.holder
        assert f"pid={os.getpid()}" in refused.value.holder
        assert f"host={socket.gethostname()[:30]}" in refused.value.holder
        assert "password" not in str(refused.value)
    # Closing the owner's session released it.
    with _open(tmp_path, pg_url):
        pass


def test_two_schemas_of_one_database_are_two_stores(tmp_path: Path, pg_url: str) -> None:
    other = pg_url.replace("schema=t_", "schema=u_")
    try:
        with _open(tmp_path / "a", pg_url), _open(tmp_path / "b", other):
            pass
    finally:
        with psycopg.connect(pg_url.split("?")[0], autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{parse_url(other).schema}" CASCADE')


_OWNER = """
import sys
from agentkeep.persistence.opening import open_store
store = open_store(sys.argv[1], database=sys.argv[2])
print("owned", flush=True)
sys.stdin.read()  # until killed
"""


def test_sigkill_of_the_owner_releases_the_store(tmp_path: Path, pg_url: str) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_OWNER), str(tmp_path / "child"), pg_url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        lines = iter(child.stdout.readline, "")  # its log lines, then ours
        assert any(line.strip() == "owned" for line in lines)
        with pytest.raises(StoreLockedError) as refused:
            open_store(tmp_path / "state", database=pg_url)
        assert refused.value.holder_pid == child.pid
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for stream in (child.stdin, child.stdout):
            if stream is not None:
                stream.close()
    _wait_until_free(pg_url)
    with _open(tmp_path, pg_url) as store:
        _create(store, "after-the-kill")


def test_a_dropped_session_is_replaced_with_the_lock_taken_again(
    tmp_path: Path, pg_url: str, server: str
) -> None:
    with _open(tmp_path, pg_url) as store:
        _create(store, "a")
        before = store.backend_pid
        _terminate(server, before)
        _create(store, "b")  # the BEGIN found the session dead: reconnected, lock retaken
        assert store.backend_pid != before
        with pytest.raises(StoreLockedError):
            open_store(tmp_path / "other", database=pg_url)
        assert store.read(lambda tx: [tx.agents.get(i) is not None for i in ("a", "b")]) == [
            True,
            True,
        ]


def test_a_writer_whose_store_another_owner_took_stops_for_good(
    tmp_path: Path, pg_url: str, server: str
) -> None:
    store = _open(tmp_path, pg_url)
    try:
        _create(store, "a")
        _terminate(server, store.backend_pid)
        with _open(tmp_path / "thief", pg_url) as thief:
            _create(thief, "stolen")
            with pytest.raises(StoreOwnershipLostError, match="another owner holds the store"):
                _create(store, "b")
            assert isinstance(store.refusal, StoreOwnershipLostError)
            with pytest.raises(StoreOwnershipLostError):
                _create(store, "c")
    finally:
        store.close()


def test_an_owner_that_came_and_went_meanwhile_is_noticed(
    tmp_path: Path, pg_url: str, server: str
) -> None:
    store = _open(tmp_path, pg_url)
    try:
        _terminate(server, store.backend_pid)
        with _open(tmp_path / "visitor", pg_url) as visitor:
            _create(visitor, "written-meanwhile")
        _wait_until_free(pg_url)
        # The lock is free again, but this writer's view of the store is stale.
        with pytest.raises(StoreOwnershipLostError, match="owned the store meanwhile"):
            _create(store, "b")
    finally:
        store.close()


def test_the_owner_holds_its_state_directorys_lock_file_too(tmp_path: Path, pg_url: str) -> None:
    """The daemon's files are the state directory's: one owner per directory, and the lock
    file names it (a daemon is found by that pid), whichever backend holds the store."""
    other = pg_url.replace("schema=t_", "schema=v_")
    try:
        with _open(tmp_path, pg_url):
            lock_file = tmp_path / "state" / "agents.db.lock"
            assert lock_file.read_text().strip() == str(os.getpid())
            with pytest.raises(StoreLockedError):
                open_store(tmp_path / "state", database=other)
        assert lock_file.read_text() == ""  # released with the store
    finally:
        with psycopg.connect(pg_url.split("?")[0], autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{parse_url(other).schema}" CASCADE')


def test_a_closed_store_can_be_reopened_at_once(tmp_path: Path, pg_url: str) -> None:
    """Closing releases the lock by a statement before the socket closes: the server ends a
    closed session a moment later, and a reopen must not find its own old lock held."""
    for round_ in range(10):
        with _open(tmp_path, pg_url) as store:
            _create(store, f"round-{round_}")
