"""Crash campaign: a real child process submitting transactions is SIGKILLed at seeded points.

Each seed picks one way to die: the store's own fault point (``AGENTKEEP_FAULT_AT`` in kill
mode, so the crash can land inside a group commit, between savepoints, or after COMMIT
before the callers hear back), or the parent killing the child after a seeded number of
acknowledgements. The parent then reopens the store and checks:

- every acknowledged transaction is present whole;
- no transaction is present in part (unacknowledged ones may be present whole: they may
  have committed in the instant before the kill);
- on SQLite, ``PRAGMA integrity_check`` is ok and no foreign key dangles (a PostgreSQL
  server enforces its foreign keys itself and has no file to check).

It runs on both backends: ``database_url`` is None on the SQLite pass (the store in the
state directory) and a fresh schema on the PostgreSQL pass, where the fault point counts the
PostgreSQL writer's operations.

Seeds come from ``tests/chaos/conftest.py``: ``CHAOS_SEEDS=N`` runs seeds 0..N-1,
``CHAOS_SEED=S`` runs only seed S.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from agentkeep.persistence import FAULT_AT_ENV, FAULT_MODE_ENV
from agentkeep.persistence.opening import open_store

THREADS = 4
PER_THREAD = 40
TOTAL = THREADS * PER_THREAD
# Operations per transaction: SAVEPOINT, 2 kv writes, claim, append (SELECT + INSERT),
# RELEASE; plus BEGIN, COMMIT and after_commit per group (groups hold about 2-4 items). Fault
# indexes are drawn up to about the end of a full run, so a few seeds also see no crash.
OPERATIONS_BOUND = TOTAL * 8
TIMEOUT = 60.0


# The child: THREADS submitters, each writing PER_THREAD transactions of four parts, and
# writing "ACK <id>" (one write(2), so lines never interleave) after transact() returned.
_CHILD = """
import os, sys, threading
import structlog
structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
from agentkeep.persistence.opening import open_store
from agentkeep.types.records import AgentRow, UserRecord
from agentkeep.types import TextBlock, UserMessage

home, threads, per_thread = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
store = open_store(home, database=sys.argv[4] or None)
store.transact(lambda tx: tx.agents.create(AgentRow(id="agent", config={})))
os.write(1, b"READY\\n")

def submit(thread):
    for n in range(per_thread):
        tx_id = f"t{thread}n{n}"
        def work(tx, tx_id=tx_id):
            tx.kv.write(f"tx.{tx_id}.a", tx_id)
            tx.queue.claim_message_id("agent", tx_id)
            tx.records.append("agent", UserRecord(
                message_id=tx_id, message=UserMessage(content=(TextBlock(text=tx_id),))))
            tx.kv.write(f"tx.{tx_id}.b", tx_id)
        store.transact(work)
        os.write(1, f"ACK {tx_id}\\n".encode())

workers = [threading.Thread(target=submit, args=(t,)) for t in range(threads)]
for w in workers: w.start()
for w in workers: w.join()
store.close()
os.write(1, b"DONE\\n")
"""


def _run_child(home: Path, rng: random.Random, database: str | None) -> tuple[set[str], str]:
    env = dict(os.environ)
    env.pop(FAULT_AT_ENV, None)
    kill_after_acks: int | None = None
    if rng.random() < 0.5:
        mode = "fault_point"
        # Any index: in the agent's creation, inside a group, or after a COMMIT.
        env[FAULT_AT_ENV] = str(rng.randint(1, OPERATIONS_BOUND))
        env[FAULT_MODE_ENV] = "kill"
        how = f"fault_point AGENTKEEP_FAULT_AT={env[FAULT_AT_ENV]}"
    else:
        mode = "parent_kill"
        kill_after_acks = rng.randint(0, TOTAL)
        how = f"parent_kill after {kill_after_acks} acks"
    acked: set[str] = set()
    with subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(home), str(THREADS), str(PER_THREAD), database or ""],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        text=True,
    ) as child:
        assert child.stdout is not None
        try:
            for line in child.stdout:
                word, _, tx_id = line.strip().partition(" ")
                if word == "ACK":
                    acked.add(tx_id)
                if (
                    mode == "parent_kill"
                    and kill_after_acks is not None
                    and word in {"READY", "ACK"}
                    and len(acked) >= kill_after_acks
                ):
                    child.send_signal(signal.SIGKILL)
                    kill_after_acks = None  # keep reading what was already written
        finally:
            if child.poll() is None and mode == "parent_kill":
                child.kill()
            child.wait(TIMEOUT)
        if mode == "fault_point":
            # Either the fault point killed it, or the index lay past the whole run.
            assert child.returncode in (-signal.SIGKILL, 0), how
    return acked, how


def _check(home: Path, acked: set[str], database: str | None) -> None:
    with open_store(home, database=database) as store:
        kv = dict(store.read(lambda tx: tx.kv.scan("tx.")))
        records = store.read(lambda tx: tx.records.load("agent"))
        claimed = {
            str(row[0])
            for row in store.read(lambda tx: tx.sql.query("SELECT message_id FROM message_ids"))
        }
    if database is None:  # the file's own checks: SQLite's alone
        connection = apsw.Connection(str(home / "agents.db"), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            assert connection.execute("PRAGMA foreign_key_check").fetchall() == []
        finally:
            connection.close()
    recorded = [record.message_id for record in records]  # type: ignore[union-attr]
    assert len(recorded) == len(set(recorded)), "a transaction's record appears twice"
    parts = {
        "a": {key.split(".")[1] for key in kv if key.endswith(".a")},
        "b": {key.split(".")[1] for key in kv if key.endswith(".b")},
        "claim": claimed,
        "record": set(recorded),
    }
    present = set().union(*parts.values())
    for name, ids in parts.items():
        partial = present - ids
        assert not partial, f"transactions present without their {name!r} part: {partial}"
    missing = acked - present
    assert not missing, f"acknowledged transactions lost: {sorted(missing)}"


@pytest.mark.slow
def test_acknowledged_transactions_survive_sigkill_whole(
    tmp_path: Path, seed: int, database_url: str | None
) -> None:
    rng = random.Random(seed)
    home = tmp_path / "home"
    acked, how = _run_child(home, rng, database_url)
    replay = f"CHAOS_SEED={seed} {sys.executable} -m pytest {__file__}"
    try:
        _check(home, acked, database_url)
    except AssertionError as exc:
        raise AssertionError(f"seed {seed} ({how}) failed: {exc}\nreplay: {replay}") from exc
