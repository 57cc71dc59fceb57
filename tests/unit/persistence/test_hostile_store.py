"""The store under hostile conditions.

- A log sink that cannot write (a full disk under the log: ``OSError(ENOSPC)``) never reaches
  the writer: the line is dropped and counted, the writer keeps serving.
- A COMMIT the file system refuses answers ``store_not_writable`` and the writer stays up.
- The database file deleted or replaced under a running store: the next commit notices, rolls
  back and the store stops acknowledging writes (``store_replaced``).
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest
import structlog

from agentkeep.chaos.faultpoints import expect_label, find_label, recording_labels
from agentkeep.cli.logs import configure_logging
from agentkeep.errors import (
    CommitOutcomeUnknownError,
    StoreNotWritableError,
    StoreReplacedError,
)
from agentkeep.logs import SafePrintLogger, dropped_log_lines, get_logger
from agentkeep.persistence import FaultPlan, Store, Transaction
from agentkeep.persistence.disk import refused_by_disk


class FullDiskStream:
    """A stderr on a full disk: every write raises ENOSPC."""

    def __init__(self) -> None:
        self.attempts = 0

    def write(self, text: str) -> int:
        self.attempts += 1
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    def isatty(self) -> bool:
        return False


@pytest.fixture(autouse=True)
def _restore_structlog() -> Iterator[None]:
    saved = structlog.get_config()
    try:
        yield
    finally:
        structlog.configure(**saved)


def _write(key: str, value: int) -> Callable[[Transaction], int]:
    def work(tx: Transaction) -> int:
        tx.kv.write(key, value)
        return value

    return work


def _commit_fault(tmp_path: Path) -> FaultPlan:
    with recording_labels() as recording, Store.open(tmp_path / "dry") as store:
        store.transact(_write("k", 1))
        labels = list(recording.labels)
    return FaultPlan(at=expect_label(labels, find_label(labels, "COMMIT"), "COMMIT"), mode="flaky")


@pytest.mark.parametrize("sink", ["cli_logging", "embedder_print_logger"])
def test_a_log_sink_on_a_full_disk_never_reaches_the_writer(tmp_path: Path, sink: str) -> None:
    """A COMMIT error makes the writer log an error; that line cannot be written. The caller
    still gets the COMMIT's own answer, the next write commits, close finishes."""
    plan = _commit_fault(tmp_path)
    stream = FullDiskStream()
    if sink == "cli_logging":  # the daemon's own configuration (our safe sink)
        configure_logging("info", stream=stream)  # type: ignore[arg-type]
    else:  # an embedder's raising sink: the runtime's guarded loggers drop its errors
        structlog.configure(logger_factory=structlog.PrintLoggerFactory(stream))  # type: ignore[arg-type]
    before = dropped_log_lines()
    with Store.open(tmp_path / "store", faults=plan) as store:
        with pytest.raises(CommitOutcomeUnknownError):
            store.transact(_write("k", 1))
        assert store.transact(_write("j", 2)) == 2
        assert store.read(lambda tx: tx.kv.scan("")) == [("j", 2)]
    assert stream.attempts > 0  # the writer did log (into the full disk)
    assert dropped_log_lines() > before  # ... and the lines were dropped and counted


def test_a_safe_print_logger_drops_and_counts_what_it_cannot_write() -> None:
    before = dropped_log_lines()
    SafePrintLogger(FullDiskStream()).error("a line")  # type: ignore[arg-type]
    assert dropped_log_lines() == before + 1


def test_a_guarded_logger_swallows_a_raising_pipeline() -> None:
    def boom(logger: Any, name: str, event: Any) -> Any:
        raise RuntimeError("a processor's bug")

    structlog.configure(processors=[boom])
    before = dropped_log_lines()
    log = get_logger("agentkeep.test")
    log.error("x", a=1)
    log.bind(b=2).warning("y")
    assert dropped_log_lines() == before + 2


@pytest.mark.sqlite_only("the file system refusing SQLite's writes (the fault-injecting VFS)")
def test_disk_refusals_say_why(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        connection = apsw.Connection(str(store.path))
        try:
            full = refused_by_disk(connection, apsw.FullError("database or disk is full"))
            assert isinstance(full, StoreNotWritableError)
            assert full.code == "store_not_writable"
            assert full.reason == "disk_full"
            assert "full" in str(full)
            read_only = refused_by_disk(connection, apsw.ReadOnlyError("readonly"))
            assert isinstance(read_only, StoreNotWritableError)
            assert read_only.reason == "read_only"
            other = apsw.ConstraintError("x")
            assert refused_by_disk(connection, other) is other
        finally:
            connection.close()


@pytest.mark.sqlite_only("deletes the SQLite database file under a running store")
def test_a_deleted_store_file_stops_acknowledging(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        assert store.transact(_write("k", 1)) == 1
        assert store.refusal is None
        os.unlink(store.path)
        with pytest.raises(StoreReplacedError) as caught:
            store.transact(_write("k", 2))
        assert "deleted" in str(caught.value)
        assert caught.value.code == "store_replaced"
        with pytest.raises(StoreReplacedError):  # and every write after it
            store.transact(_write("j", 3))
        assert isinstance(store.refusal, StoreReplacedError)


@pytest.mark.sqlite_only("replaces the SQLite database file under a running store")
def test_a_replaced_store_file_stops_acknowledging(tmp_path: Path) -> None:
    with Store.open(tmp_path) as store:
        assert store.transact(_write("k", 1)) == 1
        copy = tmp_path / "copy.db"
        shutil.copyfile(store.path, copy)
        os.replace(copy, store.path)
        with pytest.raises(StoreReplacedError) as caught:
            store.transact(_write("k", 2))
        assert "replaced" in str(caught.value)
        assert store.refusal is not None


class _ReadOnlyFile(apsw.VFSFile):  # type: ignore[misc]
    def __init__(self, name: Any, flags: list[int], vfs: _ReadOnlyVFS) -> None:
        super().__init__("", name, flags)
        self._vfs = vfs

    def xWrite(self, data: bytes, offset: int) -> None:  # noqa: N802  # apsw's name
        if self._vfs.read_only:
            raise apsw.ReadOnlyError("the file system is read-only (EROFS)")
        super().xWrite(data, offset)


class _ReadOnlyVFS(apsw.VFS):  # type: ignore[misc]
    """The default VFS whose writes fail as on a file system remounted read-only."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.read_only = False
        super().__init__(name, "")

    def xOpen(self, name: Any, flags: list[int]) -> _ReadOnlyFile:  # noqa: N802
        return _ReadOnlyFile(name, flags, self)


@pytest.mark.sqlite_only("a read-only file system under the SQLite database file")
def test_a_read_only_file_system_is_refused_clearly_and_writes_resume(tmp_path: Path) -> None:
    vfs = _ReadOnlyVFS(f"agentkeep-read-only-{os.getpid()}")
    try:
        with Store.open(tmp_path, vfs=vfs.name) as store:
            assert store.transact(_write("k", 1)) == 1
            vfs.read_only = True
            refusals = []
            for n in range(3):
                with pytest.raises(CommitOutcomeUnknownError) as caught:
                    store.transact(_write(f"r{n}", n))
                refusals.append(caught.value)
            for refused in refusals:
                assert refused.code == "store_not_writable"
                assert "read-only" in str(refused)
            vfs.read_only = False  # remounted read-write: no restart needed
            assert store.transact(_write("j", 2)) == 2
            assert store.read(lambda tx: tx.kv.read("j")) == 2
    finally:
        vfs.unregister()
