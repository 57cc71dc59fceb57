"""I/O faults through an apsw VFS: the Nth write or sync fails with an I/O error.

Under concurrent load, whatever fails: every transaction is all or nothing, every
transaction reported done is durable, one reported failed with a known outcome is absent,
and the writer keeps working once the fault clears.
"""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Iterator
from itertools import count
from pathlib import Path
from typing import Any

import apsw
import pytest

from agentkeep.errors import CommitOutcomeUnknownError, StoreError
from agentkeep.persistence import Store, Transaction

pytestmark = pytest.mark.sqlite_only(
    "I/O errors injected under the database file through an apsw VFS: a PostgreSQL store has "
    "no file under it (a server's failures are pg_server_faults': terminated backends, "
    "immediate stops)"
)

THREADS = 4
PER_THREAD = 15
TIMEOUT = 60.0
_names = count()


class FaultSwitch:
    """Shared by every file the VFS opens: counts writes and syncs, fails the armed one."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.kind: str | None = None  # "write" or "sync"
        self.remaining = 0
        self.fired = 0
        self.sticky = False  # keep failing once fired (a dead disk) until disarmed

    def arm(self, kind: str, nth: int, *, sticky: bool) -> None:
        with self.lock:
            self.kind, self.remaining, self.fired, self.sticky = kind, nth, 0, sticky

    def disarm(self) -> None:
        with self.lock:
            self.kind = None

    def check(self, kind: str) -> None:
        with self.lock:
            if self.kind != kind:
                return
            if self.fired and self.sticky:
                raise apsw.IOError(f"injected sticky {kind} failure")
            self.remaining -= 1
            if self.remaining == 0:
                self.fired += 1
                raise apsw.IOError(f"injected {kind} failure")


class FaultyFile(apsw.VFSFile):  # type: ignore[misc]
    def __init__(self, name: Any, flags: list[int], switch: FaultSwitch) -> None:
        super().__init__("", name, flags)
        self._switch = switch

    def xWrite(self, data: bytes, offset: int) -> None:  # noqa: N802  # apsw's name
        self._switch.check("write")
        super().xWrite(data, offset)

    def xSync(self, flags: int) -> None:  # noqa: N802  # apsw's name
        self._switch.check("sync")
        super().xSync(flags)


class FaultyVFS(apsw.VFS):  # type: ignore[misc]
    """The default VFS, with writes and syncs routed through a :class:`FaultSwitch`."""

    def __init__(self, name: str, switch: FaultSwitch) -> None:
        self.name = name
        self.switch = switch
        super().__init__(name, "")

    def xOpen(self, name: Any, flags: list[int]) -> FaultyFile:  # noqa: N802  # apsw's name
        return FaultyFile(name, flags, self.switch)


@pytest.fixture
def faulty_vfs() -> Iterator[FaultyVFS]:
    vfs = FaultyVFS(f"agentkeep-faulty-{next(_names)}", FaultSwitch())
    try:
        yield vfs
    finally:
        vfs.unregister()


def _work(tx_id: str) -> Any:
    def work(tx: Transaction) -> str:
        # Several statements, several pages: a partial outcome would be visible.
        tx.kv.write(f"tx.{tx_id}.a", tx_id * 50)
        tx.kv.write(f"tx.{tx_id}.b", tx_id * 50)
        tx.kv.write(f"tx.{tx_id}.c", tx_id * 50)
        return tx_id

    return work


def _load(store: Store, vfs: FaultyVFS, sticky: bool, rng: random.Random) -> dict[str, str]:
    """Concurrent submitters under an armed fault; returns each tx id's outcome."""
    # Within the run: each group commit syncs at least once and writes several pages.
    kind = rng.choice(["write", "sync"])
    vfs.switch.arm(kind, rng.randint(1, 40 if kind == "write" else 12), sticky=sticky)
    outcomes: dict[str, str] = {}
    lock = threading.Lock()

    def submit(thread: int) -> None:
        for n in range(PER_THREAD):
            tx_id = f"t{thread}n{n}"
            try:
                store.transact(_work(tx_id))
                outcome = "ok"
            except CommitOutcomeUnknownError:
                outcome = "unknown"
            except (apsw.Error, Exception):
                outcome = "failed"
            with lock:
                outcomes[tx_id] = outcome

    threads = [threading.Thread(target=submit, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
    vfs.switch.disarm()
    return outcomes


def _check(home: Path, outcomes: dict[str, str]) -> None:
    with Store.open(home) as store:
        rows = dict(store.read(lambda tx: tx.kv.scan("tx.")))
    connection = apsw.Connection(str(home / "agents.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        connection.close()
    for tx_id, outcome in outcomes.items():
        parts = [rows.get(f"tx.{tx_id}.{part}") for part in "abc"]
        present = [part is not None for part in parts]
        assert all(present) or not any(present), f"{tx_id} is partly present: {present}"
        if outcome == "ok":
            assert all(present), f"{tx_id} was acknowledged but is missing"
        elif outcome == "failed":
            assert not any(present), f"{tx_id} failed with a known outcome but is present"


@pytest.mark.parametrize("sticky", [False, True], ids=["one_fault", "until_cleared"])
def test_io_faults_leave_every_transaction_whole_and_the_writer_usable(
    tmp_path: Path, faulty_vfs: FaultyVFS, seed: int, sticky: bool
) -> None:
    rng = random.Random(seed)
    replay = f"CHAOS_SEED={seed} {sys.executable} -m pytest {__file__}"
    home = tmp_path / "home"
    with Store.open(home, vfs=faulty_vfs.name) as store:
        outcomes = _load(store, faulty_vfs, sticky, rng)
        # The fault has cleared: the same writer commits again.
        assert store.transact(_work("after")) == "after", replay
        stats = store.statistics()
    outcomes["after"] = "ok"
    try:
        _check(home, outcomes)
        assert faulty_vfs.switch.fired >= 1, "the armed fault never fired"
    except AssertionError as exc:
        raise AssertionError(
            f"seed {seed} failed: {exc}\nwriter: {stats}\nreplay: {replay}"
        ) from exc


def test_an_io_error_that_aborts_the_transaction_fails_the_group_with_a_known_outcome(
    tmp_path: Path, faulty_vfs: FaultyVFS
) -> None:
    """A write error while spilling pages mid-group makes SQLite abandon the whole
    transaction: the failing item's caller gets the I/O error, its earlier group-mates get a
    StoreError (their work is not durable, a known outcome), later items run in a new group.
    """
    with Store.open(tmp_path, vfs=faulty_vfs.name) as store:
        # A tiny page cache makes a big work item spill (write) before COMMIT.
        store.transact(lambda tx: tx._x.statements.connection.execute("PRAGMA cache_size = 1"))  # type: ignore[attr-defined]

        def big(tx: Transaction) -> str:
            for j in range(200):
                tx.kv.write(f"big.{j}", "x" * 500)
            return "big"

        started, release = threading.Event(), threading.Event()

        def blocker(tx: Transaction) -> None:
            started.set()
            assert release.wait(TIMEOUT)

        outcomes: dict[str, Any] = {}

        def submit(name: str, work: Any) -> None:
            try:
                outcomes[name] = store.transact(work)
            except Exception as exc:
                outcomes[name] = exc

        threads = [threading.Thread(target=submit, args=("blocker", blocker))]
        threads[0].start()
        assert started.wait(TIMEOUT)
        # Queued one by one, so the group runs them in this order.
        for queued, (name, work) in enumerate(
            [("before", _work("before")), ("big", big), ("after", _work("after"))], start=1
        ):
            thread = threading.Thread(target=submit, args=(name, work))
            thread.start()
            threads.append(thread)
            assert store.handle.wait_for_queued(queued, timeout_seconds=TIMEOUT)
        faulty_vfs.switch.arm("write", 1, sticky=False)
        release.set()
        for thread in threads:
            thread.join(TIMEOUT)
        faulty_vfs.switch.disarm()
        assert isinstance(outcomes["big"], apsw.IOError)
        assert isinstance(outcomes["before"], StoreError)
        assert outcomes["after"] == "after"
        rows = dict(store.read(lambda tx: tx.kv.scan("")))
    assert not any(key.startswith(("big.", "tx.before.")) for key in rows)
    assert rows["tx.after.a"] == "after" * 50
