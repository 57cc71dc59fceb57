"""The checks of :mod:`agentkeep.chaos.worker_failover`, read from the schema: the fence log
(``F1``, ``F2``) and the run's keys, answers, ledgers and live turns (:func:`judge_run`:
``K1``, ``K2``, ``L1``, ``T1``).

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
import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

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


def _query(url: str, text: str, *args: Any) -> list[tuple[Any, ...]]:
    from psycopg import sql

    with admin(url) as session:
        session.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(_schema(url))))
        return list(session.execute(text, args).fetchall())


def live_turns(url: str) -> int:
    """How many turns of ``url``'s schema are queued, running or cancelling."""
    rows = _query(
        url, "SELECT count(*) FROM turns WHERE status IN ('queued', 'running', 'cancelling')"
    )
    return int(rows[0][0])


def judge_run(url: str, accepted: dict[str, tuple[str, str]]) -> list[str]:
    """``K1``, ``K2``, ``L1``, ``T1`` over the schema; ``accepted``: key -> (session, the turn
    its first answer named)."""
    problems: list[str] = []
    turns: dict[tuple[str, str], list[tuple[str, str, str | None]]] = {}
    for agent, key, turn, status, message in _query(
        url, "SELECT agent_id, idempotency_key, id, status, message_id FROM turns"
    ):
        turns.setdefault((agent, key), []).append((turn, status, message))
    events: dict[str, list[tuple[int, str, str]]] = {}
    for agent, sequence, kind, data in _query(
        url, "SELECT agent_id, sequence, type, data_json FROM session_events ORDER BY sequence"
    ):
        events.setdefault(agent, []).append((int(sequence), str(kind), str(data)))
    for key, (session, turn) in sorted(accepted.items()):
        found = turns.get((session, key), [])
        if [t[0] for t in found] != [turn]:
            problems.append(f"K1: key {key} of {session}: turns {found}, answered {turn}")
        elif found[0][1] != "completed":
            problems.append(f"K1: key {key}'s turn {turn} ended {found[0][1]}")
    for agent, rows in sorted(events.items()):
        if [s for s, _, _ in rows] != list(range(1, len(rows) + 1)):
            problems.append(f"L1: {agent}'s ledger is not dense: {[s for s, _, _ in rows]}")
        problems += _answered(agent, rows, turns)
    live = live_turns(url)
    if live:
        problems.append(f"T1: {live} turns left live")
    return problems


def _answered(
    agent: str,
    rows: list[tuple[int, str, str]],
    turns: dict[tuple[str, str], list[tuple[str, str, str | None]]],
) -> list[str]:
    """``K2``: each accepted message accepted once, and its turn ended exactly once, with an
    answer (one ``turn.completed`` carrying the reply, no other end)."""
    problems: list[str] = []
    accepted: Counter[str] = Counter()
    turn_of: dict[str, str] = {}
    ends: Counter[str] = Counter()
    for _, kind, data in rows:
        fields = json.loads(data)
        if kind == "message.accepted":
            accepted[str(fields.get("message_id"))] += 1
            turn_of[str(fields.get("message_id"))] = str(fields.get("turn_id"))
        elif kind in ("turn.completed", "turn.failed", "turn.cancelled", "turn.interrupted"):
            ends[str(fields.get("turn_id"))] += 1
            if kind == "turn.completed" and not (fields.get("result") or {}).get("message"):
                problems.append(f"K2: {agent}'s turn {fields.get('turn_id')} has no answer")
    for message, times in accepted.items():
        if times != 1:
            problems.append(f"K2: {agent}'s message {message} accepted {times} times")
        if ends[turn_of[message]] != 1:
            problems.append(
                f"K2: {agent}'s message {message} (turn {turn_of[message]}) answered "
                f"{ends[turn_of[message]]} times"
            )
    messages = {m for (a, _), found in turns.items() if a == agent for _, _, m in found if m}
    if messages - set(accepted):
        problems.append(f"K2: {agent}'s turns' messages without acceptance: {messages}")
    return problems


__all__ = [
    "FenceWrite",
    "fence_log",
    "install_fence_log",
    "judge_fence_log",
    "judge_run",
    "live_turns",
]
