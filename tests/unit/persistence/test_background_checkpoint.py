"""The idle writer's checkpoints run in the background: a commit arriving while one
copies the WAL does not wait for it, and the WAL still restarts, so it stays bounded."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest

from agentkeep.persistence import Store, Transaction, checkpointer

pytestmark = pytest.mark.sqlite_only("SQLite's WAL checkpoints")

TIMEOUT = 30.0
#: The raced checkpoint's threshold, in WAL pages (4x, the writer's last resort, is far off).
THRESHOLD = 4


def _write(key: str, value: int) -> Callable[[Transaction], None]:
    def work(tx: Transaction) -> None:
        tx.kv.write(key, value)

    return work


def test_a_commit_does_not_wait_for_a_checkpoint_under_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = threading.Event()
    release = threading.Event()
    copy_all = checkpointer._copy_all

    def held(connection: apsw.Connection) -> None:
        started.set()
        assert release.wait(TIMEOUT)
        copy_all(connection)

    monkeypatch.setattr(checkpointer, "_copy_all", held)
    Store.open(tmp_path).close()  # migrated, and its WAL checkpointed away: empty
    with Store.open(tmp_path, checkpoint_pages=2) as store:
        store.transact(_write("k0", 0))
        store.transact(_write("k1", 1))  # past the threshold, and nothing queued after it
        assert started.wait(TIMEOUT)  # the checkpoint is under way, and held there
        try:
            # On the writer's thread this commit would wait behind the checkpoint forever.
            store.transact(_write("during", 2), timeout_seconds=TIMEOUT)
            assert store.read(lambda tx: tx.kv.read("during")) == 2
            assert store.statistics().checkpoints == 0  # not finished: it is still held
        finally:
            release.set()
        assert store.handle.wait_for_checkpoints(1, timeout_seconds=TIMEOUT)
    with Store.open(tmp_path) as reopened:
        assert reopened.read(lambda tx: [tx.kv.read(k) for k in ("k0", "k1", "during")]) == [
            0,
            1,
            2,
        ]


def _raced_checkpoint(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int, list[int]]:
    """One background checkpoint held after its copy while three commits land, then let go:
    the WAL's pages when the copy finished, after the three commits, and after each of three
    more (once the checkpoint returned)."""
    copied = threading.Event()
    release = threading.Event()
    copy_all = checkpointer._copy_all

    def then_held(connection: apsw.Connection) -> None:
        copy_all(connection)
        copied.set()  # every frame so far is copied; the checkpoint has not returned yet
        assert release.wait(TIMEOUT)

    monkeypatch.setattr(checkpointer, "_copy_all", then_held)
    Store.open(path).close()  # migrated, and its WAL checkpointed away: empty
    threshold = THRESHOLD
    with Store.open(path, checkpoint_pages=threshold) as store:
        for n in range(2 * threshold):  # until past the threshold, with nothing queued
            store.transact(_write(f"k{n}", n))
            if copied.is_set():
                break
        assert copied.wait(TIMEOUT)
        before = store.statistics().wal_pages
        for n in range(3):
            store.transact(_write(f"raced{n}", n))
        grown = store.statistics().wal_pages
        release.set()
        assert store.handle.wait_for_checkpoints(1, timeout_seconds=TIMEOUT)
        # At its next idle moment the writer copies the tail itself; the commit after that
        # restarts the WAL (a few frames, not the grown count plus more).
        pages = []
        for n in range(3):
            store.transact(_write(f"after{n}", n))
            pages.append(store.statistics().wal_pages)
    return before, grown, pages


def test_the_wal_restarts_though_a_commit_raced_the_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race this is about: a commit lands while the checkpoint copies (the writer keeps
    committing after asking for it), so frames are left uncopied and the WAL cannot restart
    on the checkpoint's account alone; the three commits after the copy then grow it. Should
    the copy finish before the next commit (a loaded machine), that commit restarts the WAL
    itself and the race did not happen (CI saw it once: the WAL at 4 pages after the raced
    commits, then 5, 6, 7): the scenario runs again, on a fresh store."""
    for attempt in range(8):
        with monkeypatch.context() as patch:
            before, grown, pages = _raced_checkpoint(tmp_path / f"try{attempt}", patch)
        # The WAL restarted neither before the copy was seen (still past the threshold)
        # nor during the three commits (they grew it): the race happened.
        if THRESHOLD <= before < grown:
            break
    else:
        pytest.fail(f"in 8 tries no commit raced the checkpoint's copy (last: {before}, {grown})")
    assert min(pages) < grown < 4 * THRESHOLD, (grown, pages)
