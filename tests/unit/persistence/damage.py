"""Damaging a store's file the two ways a disk (or a careless copy) does: truncation and flips."""

from __future__ import annotations

import os
from pathlib import Path

import apsw

from agentkeep.persistence import DATABASE_NAME, Store
from agentkeep.types.records import AgentRow


def make_store(home: Path, agents: int = 3) -> Path:
    """A store with a few agents, checkpointed so every page is in ``agents.db`` itself."""
    with Store.open(home) as store:
        for n in range(agents):
            store.transact(lambda tx, n=n: tx.agents.create(AgentRow(id=f"agent{n}", config={})))
    database = home / DATABASE_NAME
    connection = apsw.Connection(str(database))
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)
    return database


def truncate(database: Path) -> None:
    """Cut the file after its first two pages: the schema names pages that are gone."""
    page_size = _page_size(database)
    os.truncate(database, 2 * page_size)


def flip_bytes(database: Path, table: str = "agents", offset: int = 0) -> None:
    """Invert one byte of the header of ``table``'s root page.

    ``offset`` 0 is the page type (the page no longer parses: SQLite raises "malformed");
    5 is the start of the cell content area (``integrity_check`` reports the page).
    """
    page_size = _page_size(database)
    connection = apsw.Connection(str(database), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        (root,) = connection.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)
        ).fetchone()
    finally:
        connection.close()
    with database.open("r+b") as file:
        file.seek((root - 1) * page_size + offset)
        (byte,) = file.read(1)
        file.seek((root - 1) * page_size + offset)
        file.write(bytes([byte ^ 0xFF]))


def _page_size(database: Path) -> int:
    with database.open("rb") as file:
        header = file.read(18)
    size = int.from_bytes(header[16:18], "big")
    return 65536 if size == 1 else size
