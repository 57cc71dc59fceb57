"""The server side of :mod:`agentkeep.chaos.worker_failover`: the fence log and its checks.

A row trigger on ``session_events`` appends, for every event written, the writing session's
``application_name`` (which carries its owner token ``w=…``), the agent's partition (from
``agents.partition``) and that partition's ownership row at that moment (``agentkeep_owner``:
the current owner's token and epoch) to ``chaos_fence_log``; a row trigger on
``agentkeep_owner`` appends every stamp (partition, token, epoch) to ``chaos_fence_stamps``.
The trigger's queries run in the writer's own transaction, after the writer's statement, so
they see the ownership row as committed when the write happened.

:func:`judge_fence_log` checks, per partition:

- ``F1``: every write is by the partition's current owner (the writer's token is the token
  of the ownership row when it wrote): a write by a replaced owner is a write past its fence;
- ``F2``: the epochs of the writes (each writer's own epoch, from its stamp) never go back:
  no write under an epoch after a higher epoch wrote.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from agentkeep.chaos.invariants import INVARIANTS
from agentkeep.chaos.pg_server import admin, owner_token

INVARIANTS.update(
    {
        "F1": "every write to a partition is by its current owner (the fence holds)",
        "F2": "per partition, the epochs of writes never go back",
    }
)

_FENCE_LOG = """
CREATE TABLE IF NOT EXISTS chaos_fence_log (
    n BIGSERIAL PRIMARY KEY, app TEXT NOT NULL, agent_id TEXT NOT NULL,
    sequence BIGINT NOT NULL, part INTEGER, owner_token TEXT, owner_epoch BIGINT);
CREATE TABLE IF NOT EXISTS chaos_fence_stamps (
    n BIGSERIAL PRIMARY KEY, part INTEGER NOT NULL, token TEXT NOT NULL,
    epoch BIGINT NOT NULL);
CREATE OR REPLACE FUNCTION chaos_fence_write() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE p INTEGER; t TEXT; e BIGINT;
BEGIN
    SELECT partition INTO p FROM agents WHERE id = NEW.agent_id;
    SELECT token, epoch INTO t, e FROM agentkeep_owner WHERE partition = p;
    INSERT INTO chaos_fence_log (app, agent_id, sequence, part, owner_token, owner_epoch)
    VALUES (current_setting('application_name'), NEW.agent_id, NEW.sequence, p, t, e);
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION chaos_fence_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_fence_stamps (part, token, epoch)
    VALUES (NEW.partition, NEW.token, NEW.epoch);
    RETURN NULL;
END $$;
"""
_TRIGGERS = (
    "CREATE TRIGGER chaos_fence AFTER INSERT ON session_events "
    "FOR EACH ROW EXECUTE FUNCTION chaos_fence_write()",
    "CREATE TRIGGER chaos_fence_stamp AFTER INSERT OR UPDATE ON agentkeep_owner "
    "FOR EACH ROW EXECUTE FUNCTION chaos_fence_stamp()",
)


@dataclass(frozen=True)
class FenceWrite:
    """One logged event write."""

    app: str
    agent_id: str
    sequence: int
    partition: int | None
    owner: str | None
    owner_epoch: int | None

    @property
    def writer(self) -> str:
        """The writer's owner token."""
        return owner_token(self.app)


def _schema(url: str) -> str:
    return dict(p.split("=", 1) for p in url.split("?", 1)[1].split("&"))["schema"]


def install_fence_log(url: str) -> None:
    """The fence log and its triggers (the store's tables and ownership table must exist)."""
    import psycopg
    from psycopg import sql

    with admin(url) as session:
        session.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(_schema(url))))
        session.execute("SET lock_timeout = '5s'")
        session.execute(_FENCE_LOG)
        for trigger in _TRIGGERS:
            with contextlib.suppress(psycopg.errors.DuplicateObject):
                session.execute(trigger)


def fence_log(url: str) -> tuple[list[FenceWrite], dict[str, int]]:
    """The logged writes in log order, and each owner token's epoch (from its stamp)."""
    from psycopg import sql

    with admin(url) as session:
        session.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(_schema(url))))
        rows = session.execute(
            "SELECT app, agent_id, sequence, part, owner_token, owner_epoch "
            "FROM chaos_fence_log ORDER BY n"
        ).fetchall()
        stamps = session.execute("SELECT token, epoch FROM chaos_fence_stamps").fetchall()
    writes = [
        FenceWrite(str(a), str(g), int(s), p, o, None if e is None else int(e))
        for (a, g, s, p, o, e) in rows
    ]
    return writes, {str(token): int(epoch) for (token, epoch) in stamps}


def judge_fence_log(writes: list[FenceWrite], epochs: dict[str, int]) -> list[str]:
    """``F1`` and ``F2`` (see the module); one problem per partition and check at most."""
    problems: list[str] = []
    highest: dict[int, tuple[int, str]] = {}
    flagged: set[tuple[str, int]] = set()
    for index, write in enumerate(writes, start=1):
        part = -1 if write.partition is None else write.partition
        if write.writer != write.owner and ("F1", part) not in flagged:
            flagged.add(("F1", part))
            problems.append(
                f"F1: write #{index} ({write.agent_id} seq {write.sequence}, partition {part}) "
                f"by {write.writer} while the partition's owner was {write.owner} "
                f"(epoch {write.owner_epoch}): a write past the fence"
            )
        epoch = epochs.get(write.writer)
        if epoch is None:
            continue
        top = highest.get(part)
        if top is not None and epoch < top[0] and ("F2", part) not in flagged:
            flagged.add(("F2", part))
            problems.append(
                f"F2: write #{index} ({write.agent_id} seq {write.sequence}) on partition "
                f"{part} under epoch {epoch} by {write.writer}, after epoch {top[0]} "
                f"({top[1]}) wrote"
            )
        if top is None or epoch > top[0]:
            highest[part] = (epoch, write.writer)
    return problems


__all__ = ["FenceWrite", "fence_log", "install_fence_log", "judge_fence_log"]
