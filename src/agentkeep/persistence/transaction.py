"""The :class:`~agentkeep.persistence.interface.Transaction` over one connection: a scope
(an :class:`~agentkeep.persistence.executor.Executor`) and one statement object per table,
composed as attributes (``tx.agents``, ``tx.records``, ``tx.archive``, ``tx.ledger``,
``tx.turns``, ``tx.queue``, ``tx.calls``, ``tx.facts``, ``tx.kv``, and ``tx.sql`` for the
modules that own their tables).

Every statement goes through the connection's
:class:`~agentkeep.persistence.codec.Statements` executor, which counts it as one store
operation for the fault points and prepares it for the backend's dialect. Each method is one
or a few statements; the conditional writes (``claim_*``, ``*_if_absent``, compare-and-set,
delete-if-present) are each a single statement whose change count says whether it won, so
they are atomic even without the enclosing transaction.
"""

from __future__ import annotations

from collections.abc import Callable

from agentkeep.persistence.agents import AgentStatements
from agentkeep.persistence.archive import ArchiveStatements
from agentkeep.persistence.call_statements import CallStatements
from agentkeep.persistence.codec import Statements
from agentkeep.persistence.executor import Executor, ReadOnlyTransactionError
from agentkeep.persistence.fact_statements import FactStatements
from agentkeep.persistence.kv_statements import KvStatements
from agentkeep.persistence.ledger import LedgerHub, LedgerStatements
from agentkeep.persistence.queue_statements import QueueStatements
from agentkeep.persistence.records import RecordStatements
from agentkeep.persistence.sql import SqlStatements
from agentkeep.persistence.turns import TurnStatements

__all__ = ["ReadOnlyTransactionError", "SqliteTransaction", "Statements"]


class SqliteTransaction:
    """A :class:`~agentkeep.persistence.interface.Transaction` valid while its work runs.

    Args:
        statements: The executor of the enclosing SQL transaction.
        read_only: If True every write method raises :class:`ReadOnlyTransactionError`.
        ledger: The hub told (after COMMIT) of each event appended, and the event size
            limit (None: the default limit, nobody told).
    """

    def __init__(
        self, statements: Statements, *, read_only: bool = False, ledger: LedgerHub | None = None
    ) -> None:
        x = self._x = Executor(statements, read_only=read_only)
        self.kv = KvStatements(x)
        self.agents = AgentStatements(x, self.kv)
        self.records = RecordStatements(x)
        self.archive = ArchiveStatements(x)
        self.ledger = LedgerStatements(x, ledger)
        self.turns = TurnStatements(x, self.ledger)
        self.queue = QueueStatements(x)
        self.calls = CallStatements(x)
        self.facts = FactStatements(x)
        self.sql = SqlStatements(x)

    @property
    def active(self) -> bool:
        """False once the work function that received this transaction has returned."""
        return self._x.active

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` (in the writer's thread) once the enclosing COMMIT succeeded."""
        self._x.after_commit(callback)

    def expire(self) -> list[Callable[[], None]]:
        """End this transaction's validity; returns the registered after-commit callbacks."""
        # Buffered events are written before the item's RELEASE; any left over belong to an
        # item that failed, whose savepoint is rolled back: drop them.
        self.ledger.discard()
        return self._x.expire()
