"""What the single writer remembers of the store between statements.

Without it, a durable step re-reads the same facts many times: each session's last event
sequence, last record position, record count, last turn number, live and running turns, its
queue, notices, pending calls, settings, owed work, context tokens, agents row, archived flag
and driver, and turn rows. The writer is the only connection that writes, so it can remember
them: a :class:`WriterMemo` belongs to one :class:`~agentkeep.persistence.codec.Statements`
executor and answers those reads without SQL (58 statements per step became 25, with the
ledger's buffered events: ``LedgerStatements.append``).

Invariant (what makes a wrong answer impossible): every value the memo returns equals what
the database holds at that point of the current transaction. It keeps three layers, each
valid exactly as long as the SQL scope it mirrors:

- ``committed``: true at the last ``COMMIT`` that returned without error through this
  executor. Only a successful COMMIT adds to it (the released layer of its transaction).
- ``group``: what the open ``BEGIN IMMEDIATE`` transaction's released work items (``RELEASE
  agentkeep_work_item`` returned) changed. Dropped by the next ``BEGIN``, so a group rolled
  back as a whole (a failing group-mate, a writer failure) leaves nothing behind.
- ``item``: what the running work item changed or read. Dropped when the next item starts
  (its transaction object, its ``SAVEPOINT``) and not merged by a ``COMMIT``, so an item whose
  savepoint was rolled back leaves nothing behind. A group of one item runs it without a
  savepoint (two statements fewer per transaction); the writer ends it with
  ``Statements.end_item`` (what its ``RELEASE`` would do) once its work returned, and if it
  fails rolls back the whole transaction, whose layers the next ``BEGIN`` drops.

The writer rolls back on the connection itself (``ROLLBACK TO``, ``ROLLBACK``), which the
executor never sees; that is why a layer is dropped when its *next* scope starts, and only a
``RELEASE`` or ``COMMIT`` that returned moves values down. A memo-keeping method puts a value
only once the statement that made it true (or read it) returned, and forgets what a statement
may have changed in a way it does not follow.

Anything the memo cannot account for empties every layer, before the statement runs: a
``COMMIT`` (until it returns; if it raises its outcome is unknown and nothing comes back), a
write statement not issued by a memo-keeping method (raw SQL of a registry module or a chaos
mutant, a ``ROLLBACK``, a trigger change). After that the memo stays off (``tainted``) until
the next transaction starts. ``tx.agents.create`` forgets the agent whose rows the ``agents``
cascade wiped. A writer restart builds a new executor, hence an empty memo. Forgetting is
always safe: the next read goes to SQL.

Outside a writer's ``BEGIN IMMEDIATE`` (a reader's snapshot, a bare executor in tests) the
memo is emptied whenever a transaction object is created on it, so it caches only within
that one transaction.

The memoised tables are written by nothing else: the schema's triggers only ``RAISE``
(``tests/unit/persistence/test_memo.py`` checks this).
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["BEGIN_GROUP", "BEGIN_ITEM", "COMMIT_GROUP", "END_ITEM", "MISSING", "WriterMemo"]

# The statements of the writer's group commit (persistence/writer.py, sent by its backends:
# persistence/sqlite_writer.py, persistence/postgres/writer.py) the memo follows.
BEGIN_GROUP: Final = "BEGIN IMMEDIATE"
COMMIT_GROUP: Final = "COMMIT"
ITEM_SAVEPOINT: Final = "agentkeep_work_item"
BEGIN_ITEM: Final = f"SAVEPOINT {ITEM_SAVEPOINT}"
END_ITEM: Final = f"RELEASE {ITEM_SAVEPOINT}"

MISSING: Final[Any] = object()

# Past this many remembered values the committed layer is emptied (a bound on memory; the
# cost is one re-read of each value).
_MAX_COMMITTED = 100_000

Key = tuple[str, ...]


class WriterMemo:
    """Layered memo of store facts (see the module docstring for the invariant)."""

    __slots__ = ("_committed", "_group", "_in_group", "_item", "_pending", "_tainted", "_transient")

    def __init__(self) -> None:
        self._committed: dict[Key, Any] = {}
        self._group: dict[Key, Any] = {}
        self._item: dict[Key, Any] = {}
        # Keys whose latest value (in group or item) must not outlive the transaction: at
        # COMMIT their committed entry is dropped instead of set (e.g. a finished turn's row).
        self._transient: set[Key] = set()
        self._in_group = False
        self._tainted = False
        # While a COMMIT runs: what becomes the committed layer if it returns without error.
        self._pending: dict[Key, Any] | None = None

    @property
    def in_group(self) -> bool:
        """True inside a writer's ``BEGIN IMMEDIATE`` transaction (its items end in RELEASE)."""
        return self._in_group

    # -- reads and writes by memo-keeping methods -----------------------------------------
    def get(self, key: Key) -> Any:
        """The remembered value of ``key``, or :data:`MISSING`."""
        # Membership tests, not dict.get calls: ~53 lookups per durable step.
        if self._tainted:
            return MISSING
        layer = self._item
        if key in layer:
            return layer[key]
        layer = self._group
        if key in layer:
            return layer[key]
        return self._committed.get(key, MISSING)

    def put(self, key: Key, value: Any, *, transient: bool = False) -> None:
        """Remember ``value`` for ``key`` in the running item (call only once the statement
        that made it true, or read it, has run)."""
        if self._tainted:
            return
        self._item[key] = value
        if transient:
            self._transient.add(key)
        elif key in self._transient:
            self._transient.discard(key)

    def forget(self, key: Key) -> None:
        """Forget ``key`` in every layer (its next read goes to SQL)."""
        for layer in (self._item, self._group, self._committed):
            if key in layer:
                del layer[key]

    def forget_agent(self, agent_id: str) -> None:
        """Forget everything remembered of ``agent_id`` (keys are ``(kind, agent_id, ...)``)."""
        for layer in (self._item, self._group, self._committed):
            for key in [key for key in layer if key[1] == agent_id]:
                del layer[key]

    def forget_kind(self, kind: str) -> None:
        """Forget every remembered value of ``kind`` (keys are ``(kind, ...)``)."""
        for layer in (self._item, self._group, self._committed):
            for key in [key for key in layer if key[0] == kind]:
                del layer[key]

    def clear(self) -> None:
        """Forget everything and stay off until the next transaction starts."""
        self._committed.clear()
        self._group.clear()
        self._item.clear()
        self._transient.clear()
        self._pending = None
        self._tainted = True

    # -- the scopes, driven by the executor -----------------------------------------------
    def end_item(self) -> None:
        """The running item's work is part of the group now: its ``RELEASE`` returned, or it
        is the group's lone item (run without a savepoint: its failure rolls back the whole
        transaction, which the next ``BEGIN`` drops from the memo)."""
        if self._in_group and not self._tainted:
            self._group.update(self._item)
        self._item.clear()

    def new_transaction_object(self) -> None:
        """A transaction object is created on this executor: a new work item in a writer's
        group, else (a reader, a bare executor) a cache of its own from empty."""
        if self._in_group:
            self._item.clear()
            return
        self.clear()
        self._tainted = False

    def before(self, sql: str) -> None:
        """Called before a statement runs that is neither a read nor a memo-keeping write."""
        if sql == BEGIN_GROUP:
            # The previous group, if it did not commit, was rolled back: drop what it added.
            self._group.clear()
            self._item.clear()
            self._transient.clear()
            self._pending = None
            self._in_group = False
        elif sql == BEGIN_ITEM:
            self._item.clear()
        elif sql == END_ITEM:
            pass
        elif sql == COMMIT_GROUP and self._in_group and not self._tainted:
            # Until COMMIT returns its outcome is unknown: nothing is remembered meanwhile.
            pending = self._committed
            for key, value in self._group.items():
                if key in self._transient:
                    pending.pop(key, None)
                else:
                    pending[key] = value
            self._committed = {}
            self.clear()
            self._in_group = False
            self._pending = pending
        else:
            # Unaccounted for (raw SQL, a ROLLBACK, a COMMIT after one): forget everything.
            self.clear()
            self._in_group = False

    def after(self, sql: str) -> None:
        """Called once that statement returned without error."""
        if sql == BEGIN_GROUP:
            self._in_group = True
            # A taint emptied the committed layer, so what is left of it is true again.
            self._tainted = False
        elif sql == END_ITEM:
            self.end_item()
        elif sql == COMMIT_GROUP and self._pending is not None:
            committed, self._pending = self._pending, None
            self._tainted = False
            self._committed = {} if len(committed) > _MAX_COMMITTED else committed
