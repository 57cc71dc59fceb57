"""The chaos world of the process-kill campaign (:mod:`agentkeep.chaos.process_kills`): a
state directory real processes write, judged from copies.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw

from agentkeep.chaos.ledger_reads import read_all
from agentkeep.chaos.process import DurableState, archived_users, read_durable
from agentkeep.chaos.process_worker import AGENT_ID, OFFERS
from agentkeep.chaos.tools import Ledger, LedgerEntry
from agentkeep.chaos.world import ChaosWorld
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.store import DATABASE_NAME, Store
from agentkeep.types import SessionEvent
from agentkeep.types.records import UserRecord


class DiskWorld(ChaosWorld):
    """The harness's world over a directory real processes write: durable state is read
    from a copy (recovery and checkpoint happen there, never on the disk the next child
    recovers from), and acceptance comes from the ledger file."""

    def __init__(self, home: Path, seed: int, ledger: Path, database: str | None = None) -> None:
        super().__init__(home, seed, agent_id=AGENT_ID, database=database)
        self.ledger_path = ledger
        self.offers = list(OFFERS)
        self.integrity_problems: list[str] = []

    def read_ledger(self) -> Iterator[dict[str, Any]]:
        """The tool executions the child processes logged to the on-disk ledger, in order (none if
        it was never written).
        """
        if not self.ledger_path.exists():
            return
        for line in self.ledger_path.read_text().splitlines():
            yield json.loads(line)

    def durable(self) -> DurableState:
        return self.durable_with_events()[0]

    def durable_with_events(self) -> tuple[DurableState, list[SessionEvent]]:
        agent_id = self.agent_id

        def read(tx: Transaction) -> tuple[DurableState, list[SessionEvent]]:
            return read_durable(tx, agent_id), read_all(
                lambda after: tx.ledger.events(agent_id, after, 1000)
            )

        if self.database is not None:
            # The server's own state: read-only, so the next child recovers what it left.
            from agentkeep.persistence.postgres import PostgresReadOnlyStore

            reader = PostgresReadOnlyStore.open(self.database, self.home)
            try:
                state, events = reader.read(read)
            finally:
                reader.close()
            self._learn_acceptance(state)
            return state, events
        with tempfile.TemporaryDirectory(prefix="chaos-copy-") as scratch:
            copy = Path(scratch)
            for suffix in ("", "-wal", "-journal"):  # never -shm: it is rebuilt from the WAL
                source = self.home / (DATABASE_NAME + suffix)
                if source.exists():
                    shutil.copyfile(source, copy / source.name)
            problem = integrity_problem(copy / DATABASE_NAME)
            if problem:
                self.integrity_problems.append(problem)
            with Store.open(copy) as store:
                state, events = store.read(read)
        self._learn_acceptance(state)
        return state, events

    def _learn_acceptance(self, state: DurableState) -> None:
        """Accepted = acknowledged on the ledger, or durably present though its sender died
        before hearing back. Each process offers in the same order, so that is the order."""
        acknowledged = {e["id"] for e in self.read_ledger() if e["kind"] == "accept"}
        present = {r.message_id for r in state.records if isinstance(r, UserRecord)}
        present |= archived_users(state)
        present |= {q.id for q in state.queued}
        self.accept_order = [o.id for o in self.offers if o.id in acknowledged | present]
        ledger = Ledger()
        for line in self.read_ledger():
            if line["kind"] == "tool":
                del line["kind"], line["pid"]
                ledger.record(LedgerEntry(**line))
        self.ledger = ledger


def store_exists(world: DiskWorld) -> bool:
    """Whether a child got as far as creating the store (its file, or its schema's migrations
    on PostgreSQL): before that there is nothing to judge."""
    if world.database is None:
        return (world.home / DATABASE_NAME).exists()
    from agentkeep.errors import StoreError
    from agentkeep.persistence.postgres import PostgresReadOnlyStore

    try:
        PostgresReadOnlyStore.open(world.database, world.home).close()
    except StoreError:
        return False
    return True


def integrity_problem(database: Path) -> str | None:
    """SQLite's ``PRAGMA integrity_check`` of ``database``: None when it is sound (or absent), else
    what it reported.
    """
    if not database.exists():
        return None
    connection = apsw.Connection(str(database))
    try:
        rows = connection.execute("PRAGMA integrity_check").fetchall()
    finally:
        connection.close()
    return None if rows == [("ok",)] else f"integrity_check: {rows}"
