"""An unknown COMMIT outcome on PostgreSQL is resolved, not guessed.

A fault hook runs at the COMMIT: it terminates the writer's backend from a second connection
right before COMMIT is sent (the transaction cannot have landed), or right after COMMIT
returned, then raises as if the answer had been lost on the way (it landed). Either way the
writer asks the server (``pg_xact_status`` of the group's transaction id, once the old
session is gone) and answers its callers with what happened; it then writes on, on a new
session holding the lock again."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from agentkeep.errors import CommitOutcomeUnknownError, StoreUnavailableError
from agentkeep.persistence.ledger import LedgerHub
from agentkeep.persistence.postgres import PostgresStore, open_postgres_store
from agentkeep.types.records import AgentRow


class KillAtCommit:
    """The commit hook: at the chosen phase of the chosen COMMIT, end the writer's session."""

    def __init__(self, server: str, phase: str) -> None:
        self.server = server
        self.phase = phase
        self.armed = False
        self.skip = 0  # COMMITs of the phase to let through first, once armed
        self.fired = 0
        self.store: PostgresStore | None = None
        self.committed_before = -1  # transactions answered before the one cut

    def __call__(self, phase: str, backend_pid: int) -> None:
        if not self.armed or phase != self.phase:
            return
        if self.skip:
            self.skip -= 1
            return
        self.armed = False
        self.fired += 1
        if self.store is not None:
            self.committed_before = self.store.statistics().transactions
        with psycopg.connect(self.server, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s, 10000)", (backend_pid,))
        if phase == "after":
            raise psycopg.OperationalError("the answer to COMMIT was lost (injected)")


def _open(tmp_path: Path, url: str, hook: KillAtCommit) -> PostgresStore:
    return open_postgres_store(
        url, tmp_path, faults=None, start_writer=True, ledger=LedgerHub(), commit_hook=hook
    )


def _create(agent_id: str) -> object:
    return lambda tx: tx.agents.create(AgentRow(id=agent_id, config={}))


def _exists(store: PostgresStore, agent_id: str) -> bool:
    return store.read(lambda tx: tx.agents.get(agent_id) is not None)


def test_a_commit_cut_before_it_reached_the_server_is_answered_not_written(
    tmp_path: Path, pg_url: str, server: str
) -> None:
    hook = KillAtCommit(server, "before")
    with _open(tmp_path, pg_url, hook) as store:
        hook.armed = True
        with pytest.raises(StoreUnavailableError, match="did not commit") as refused:
            store.transact(_create("lost"))
        assert not isinstance(refused.value, CommitOutcomeUnknownError)
        assert hook.fired == 1
        assert not _exists(store, "lost")
        store.transact(_create("next"))  # a new session, the lock taken again
        assert _exists(store, "next")


def test_a_commit_whose_answer_was_lost_is_answered_committed(
    tmp_path: Path, pg_url: str, server: str
) -> None:
    hook = KillAtCommit(server, "after")
    told: list[str] = []

    def create_and_listen(tx: object) -> str:
        tx.agents.create(AgentRow(id="landed", config={}))  # type: ignore[attr-defined]
        tx.after_commit(lambda: told.append("after_commit"))  # type: ignore[attr-defined]
        return "value"

    with _open(tmp_path, pg_url, hook) as store:
        hook.armed = True
        assert store.transact(create_and_listen) == "value"
        assert hook.fired == 1
        assert told == ["after_commit"]
        assert _exists(store, "landed")
        store.transact(_create("next"))
        assert _exists(store, "next")


def test_every_caller_of_a_group_hears_the_resolved_outcome(
    tmp_path: Path, pg_url: str, server: str
) -> None:
    """Several callers in one group: all committed together, all answered so."""
    import threading

    hook = KillAtCommit(server, "after")
    with _open(tmp_path, pg_url, hook) as store:
        hook.store = store
        gate = threading.Event()
        started = threading.Event()

        def hold(_tx: object) -> None:
            started.set()
            gate.wait(30)

        holder = threading.Thread(target=store.transact, args=(hold,))
        holder.start()
        assert started.wait(30)
        results: dict[str, object] = {}
        threads = [
            threading.Thread(target=lambda i=i: results.__setitem__(i, store.transact(_create(i))))
            for i in ("g1", "g2", "g3")
        ]
        for thread in threads:
            thread.start()
        assert store.handle.wait_for_queued(3, timeout_seconds=30)
        hook.skip = 1  # the holder's own COMMIT; the next one is the group of three
        hook.armed = True
        gate.set()
        holder.join(30)
        for thread in threads:
            thread.join(30)
        assert hook.fired == 1
        assert hook.committed_before == 1  # the holder's: the cut COMMIT was the group's
        assert store.statistics().max_group_size == 3
        assert set(results) == {"g1", "g2", "g3"}
        assert all(_exists(store, i) for i in ("g1", "g2", "g3"))
