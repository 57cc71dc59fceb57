"""The one interface the runtime persists through.

Everything above ``persistence`` sees only these two protocols: a :class:`Transaction`
handed to work that runs inside a database transaction (in the writer's thread), and a
:class:`StoreHandle` that submits such work. A second backend (PostgreSQL) joins by
supplying a connection and a :mod:`~agentkeep.persistence.dialect` to the same statement
classes; the loop does not change.

Rules every implementation keeps:

- A ``Transaction`` is valid only while its work function runs; any use afterwards raises
  :class:`~agentkeep.errors.ExpiredScopeError`.
- Conditional writes (``claim_*``, ``*_if_absent``, ``*_if_present``, compare-and-set) check
  and write in one atomic step and report whether they won.
- A transaction's statement objects (``tx.turns``, ``tx.ledger`` …) share its scope: they
  expire with it, and in a read their writes raise.
- Nothing is reported committed before COMMIT has returned (and fsynced).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    # Annotations only: the statement classes import nothing of this module.
    from agentkeep.persistence.agents import AgentStatements
    from agentkeep.persistence.archive import ArchiveStatements
    from agentkeep.persistence.call_statements import CallStatements
    from agentkeep.persistence.fact_statements import FactStatements
    from agentkeep.persistence.kv_statements import KvStatements
    from agentkeep.persistence.ledger.statements import LedgerStatements
    from agentkeep.persistence.queue_statements import QueueStatements
    from agentkeep.persistence.records import RecordStatements
    from agentkeep.persistence.sql import SqlStatements
    from agentkeep.persistence.turns import TurnStatements

T = TypeVar("T")


class Transaction(Protocol):
    """Domain operations inside one database transaction, one statement object per table.

    Each attribute's class declares its statements once (with their docstrings and
    invariants) and is backend-neutral: its SQL reaches a connection only through the
    executor and the backend's dialect (:mod:`agentkeep.persistence.dialect`).
    """

    #: The identity index (``agents``).
    agents: AgentStatements
    #: The conversation records.
    records: RecordStatements
    #: Archived history (nothing leaves it but an explicit purge).
    archive: ArchiveStatements
    #: The session event ledger (append-only; docs/ledger.md).
    ledger: LedgerStatements
    #: Turns (docs/turns.md).
    turns: TurnStatements
    #: Message identities, queues and notices.
    queue: QueueStatements
    #: Pending tool calls and their result claims.
    calls: CallStatements
    #: Single-row facts: settings, owed work, context tokens.
    facts: FactStatements
    #: The sorted key-value table (scoped stores build on it).
    kv: KvStatements
    #: Raw statements of the modules that own their tables (registry, sessions).
    sql: SqlStatements

    @property
    def active(self) -> bool:
        """False once the work function that received this transaction has returned."""
        ...

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` (in the writer's thread) once the enclosing COMMIT succeeded."""
        ...


class StoreHandle(Protocol):
    """Submits work to the one writer, and reads committed state."""

    def transact(
        self, work: Callable[[Transaction], T], *, timeout_seconds: float | None = None
    ) -> T:
        """Run ``work`` inside a write transaction in the writer's thread.

        Returns ``work``'s value once the transaction (and its group) is durable. If ``work``
        raises, only its own savepoint rolls back and the exception is re-raised here. If
        COMMIT fails the outcome is unknown: ``CommitOutcomeUnknownError`` is raised and the
        caller must re-read by identity.
        """
        ...

    def read(self, work: Callable[[Transaction], T]) -> T:
        """Run read-only ``work`` against a consistent snapshot of committed state.

        May run in the caller's thread on a reader connection; write methods raise.
        """
        ...
