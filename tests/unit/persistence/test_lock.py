"""Single owner: a kernel-held lock, refused to a second opener, released by SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.postgres_server import on_sqlite

from agentkeep.errors import StoreLockedError
from agentkeep.persistence import LOCK_NAME, Store, StoreLock

TIMEOUT = 60.0

# Opens the store, reports success (or the refusal) on stdout, then waits for stdin to close.
_HOLDER = """
import sys
import structlog
structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
from agentkeep.errors import StoreLockedError
from agentkeep.persistence import Store
try:
    store = Store.open(sys.argv[1])
except StoreLockedError as exc:
    print(f"locked {exc.holder_pid}", flush=True)
    sys.exit(3)
print("opened", flush=True)
sys.stdin.read()
store.close()
"""


def _spawn(home: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(home)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def test_second_open_in_the_same_process_is_refused_naming_this_pid(tmp_path: Path) -> None:
    with Store.open(tmp_path):
        with pytest.raises(StoreLockedError) as caught:
            Store.open(tmp_path)
        assert caught.value.holder_pid == os.getpid()
        # The store it names: the database file on SQLite, the state directory (whose lock
        # file a store on a server holds) on PostgreSQL.
        assert str(tmp_path / "agents.db" if on_sqlite() else tmp_path) in str(caught.value)
    # Released on close: a new owner gets it.
    Store.open(tmp_path).close()


def test_another_process_is_refused_while_the_owner_lives_and_admitted_after_sigkill(
    tmp_path: Path,
) -> None:
    with _spawn(tmp_path) as owner:
        try:
            assert owner.stdout is not None
            assert owner.stdout.readline().strip() == "opened"
            with pytest.raises(StoreLockedError) as caught:
                Store.open(tmp_path)
            assert caught.value.holder_pid == owner.pid

            with _spawn(tmp_path) as rival:
                out, _ = rival.communicate(timeout=TIMEOUT)
            assert rival.returncode == 3
            assert out.strip() == f"locked {owner.pid}"
        finally:
            owner.send_signal(signal.SIGKILL)
            owner.wait(TIMEOUT)
    # No stale-lock cleanup: the kernel released the lock with the killed process.
    with _spawn(tmp_path) as successor:
        assert successor.stdout is not None
        assert successor.stdout.readline().strip() == "opened"
        successor.communicate("", timeout=TIMEOUT)
    assert successor.returncode == 0


@pytest.mark.sqlite_only("a damaged SQLite database file fails the open (its twin: a newer schema)")
def test_a_failed_open_releases_the_lock(tmp_path: Path) -> None:
    (tmp_path / "agents.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(Exception, match="not a database"):
        Store.open(tmp_path)
    lock = StoreLock.acquire(tmp_path / LOCK_NAME)
    assert lock.held
    lock.release()
    lock.release()
    assert not lock.held


def test_a_connection_that_fails_to_close_still_releases_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by the power-loss campaign: a reader opened through its VFS failed to close after
    # the cut, and Store.close never reached the lock's release.
    store = Store.open(tmp_path)
    store.read(lambda tx: tx.archive.last_epoch("nobody"))  # a reader connection exists
    readers = type(store.handle._readers)  # SQLite's ReaderPool or the server's readers

    def failing_close(self: object) -> None:
        raise OSError("the VFS refused to delete the WAL")

    monkeypatch.setattr(readers, "close", failing_close)
    with pytest.raises(OSError, match="refused"):
        store.close()
    monkeypatch.undo()
    store.handle._readers.close()  # what the failing close left open (psycopg warns of it)
    with Store.open(tmp_path) as again:  # the lock was released
        assert again.read(lambda tx: tx.archive.last_epoch("nobody")) == 0
