"""The one interface the runtime persists through.

Everything above ``persistence`` sees only these two protocols: a :class:`Transaction`
handed to work that runs inside a database transaction (in the writer's thread), and a
:class:`StoreHandle` that submits such work. A second backend (PostgreSQL) joins by
implementing them; the loop does not change.

Rules every implementation keeps:

- A ``Transaction`` is valid only while its work function runs; any use afterwards raises
  :class:`~agentkeep.errors.ExpiredScopeError`.
- Conditional writes (``claim_*``, ``*_if_absent``, ``*_if_present``, compare-and-set) check
  and write in one atomic step and report whether they won.
- Nothing is reported committed before COMMIT has returned (and fsynced).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from agentkeep.types import (
    AgentRow,
    ArchivedEpoch,
    ArchiveReason,
    ConversationRecord,
    JSONObject,
    OwedWork,
    PendingToolCall,
    QueuedMessage,
    QueuedNotice,
    QueueName,
    SessionEvent,
    Settings,
    ToolResultMessage,
)
from agentkeep.types.turns import TurnDelivery, TurnFailure, TurnRecord, TurnStatus

T = TypeVar("T")


class Transaction(Protocol):
    """Domain operations inside one database transaction."""

    @property
    def active(self) -> bool:
        """False once the work function that received this transaction has returned."""
        ...

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` (in the writer's thread) once the enclosing COMMIT succeeded."""
        ...

    # -- agents (identity index) ---------------------------------------------------------
    def create_agent(self, row: AgentRow) -> bool:
        """Claim ``row.id``; False if a live agent holds it. Re-creating a deleted id wipes
        everything the previous agent stored (records, queues, calls, facts, its kv)."""
        ...

    def get_agent(self, agent_id: str) -> AgentRow | None:
        """The live (not deleted) agent row, or None."""
        ...

    def list_agents(self) -> list[AgentRow]: ...

    def delete_agent(self, agent_id: str) -> bool:
        """Mark deleted (releasing the id); keeps what it wrote. Children become roots."""
        ...

    def update_metadata(self, agent_id: str, patch: JSONObject) -> JSONObject:
        """Shallow-merge ``patch`` into the metadata; returns the merged metadata."""
        ...

    def children_of(self, agent_id: str) -> list[str]: ...

    # -- conversation records ------------------------------------------------------------
    def load_records(self, agent_id: str) -> list[ConversationRecord]: ...

    def record_count(self, agent_id: str) -> int: ...

    def append_record(self, agent_id: str, record: ConversationRecord) -> int:
        """Append; returns the record's position (1-based, dense)."""
        ...

    def replace_records(
        self, agent_id: str, through_position: int, replacement: ConversationRecord
    ) -> None:
        """Compaction: delete records 1..through_position and put ``replacement`` first,
        keeping every later record (those that joined after the snapshot) after it."""
        ...

    def rewrite_records(self, agent_id: str, records: list[ConversationRecord]) -> None:
        """Replace the whole conversation (load repair, model reset)."""
        ...

    # -- archived history (nothing leaves it but an explicit purge) ------------------------
    def archive_records(
        self,
        agent_id: str,
        through_position: int | None,
        *,
        reason: ArchiveReason,
        settings: Settings | None,
    ) -> int | None:
        """Copy records 1..through_position (all of them when None) into a new archived
        epoch, before a reset or a compaction removes them from the conversation; returns
        the epoch's number, or None (and archives nothing) when there is no such record."""
        ...

    def archived_epochs(self, agent_id: str) -> list[ArchivedEpoch]:
        """The archived epochs not yet purged, oldest first, each with its records."""
        ...

    def last_epoch(self, agent_id: str) -> int:
        """The highest epoch number ever archived (purged ones included); 0 if none."""
        ...

    def purge_archived(self, agent_id: str) -> tuple[int, int]:
        """Physically delete every archived record of the agent (the current conversation is
        untouched); returns ``(epochs, records)`` purged. Epoch numbers are not reused."""
        ...

    # -- the session event ledger (append-only; docs/ledger.md) ---------------------------
    @property
    def max_event_bytes(self) -> int:
        """The bound on one event's encoded data."""
        ...

    def check_input_size(self, input: JSONObject, *, encoded: str | None = None) -> None:
        """Raise ``InputTooLargeError`` if an input message (its JSON) is over the system's
        ``max_input_bytes``; writes nothing. ``encoded``: ``input``'s stored JSON, if the
        caller has it already."""
        ...

    def check_event_size(self, what: str, data: JSONObject, *, encoded: str | None = None) -> None:
        """Raise ``EventTooLargeError`` (naming ``what`` and the limit) if ``data`` would not
        fit in one event; writes nothing. ``encoded``: ``data``'s stored JSON, if known."""
        ...

    def append_event(
        self,
        agent_id: str,
        type: str,
        data: JSONObject,
        *,
        turn_id: str | None = None,
        fit: bool = False,
        encoded: str | None = None,
    ) -> int:
        """Append one event in this transaction; returns its sequence (the session's tail
        plus one). Oversized ``data`` raises ``EventTooLargeError``, or with ``fit`` is
        replaced by its identities and sizes (a loop fact that cannot be refused).
        ``encoded``: ``data``'s stored JSON (:func:`encode_event_data`), if the caller has it
        already; it must be exactly that text."""
        ...

    def last_event_sequence(self, agent_id: str) -> int:
        """The session's highest sequence (0 before its first event)."""
        ...

    def events(self, agent_id: str, after: int = 0, limit: int = 100) -> list[SessionEvent]:
        """Up to ``limit`` events with a sequence above ``after``, in order."""
        ...

    def session_known(self, agent_id: str) -> bool:
        """True if the id names an agent, live or soft-deleted (its ledger is readable)."""
        ...

    # -- turns (docs/turns.md) -------------------------------------------------------------
    def read_turn(self, agent_id: str, turn_id: str) -> TurnRecord | None: ...

    def list_turns(self, agent_id: str, after: int = 0, limit: int = 100) -> list[TurnRecord]:
        """Up to ``limit`` turns numbered above ``after``, in order."""
        ...

    def last_turn(self, agent_id: str) -> TurnRecord | None:
        """The session's highest-numbered turn (any status), or None if it has none."""
        ...

    def live_turns(self, agent_id: str) -> list[TurnRecord]:
        """The session's queued, running and cancelling turns, in order."""
        ...

    def started_turns(self, agent_id: str) -> list[TurnRecord]:
        """The session's running and cancelling turns, in order (its queued ones left out:
        what an answer, a failure or an abort moves)."""
        ...

    def all_live_turns(self) -> list[TurnRecord]:
        """Every session's live turns (startup recovery)."""
        ...

    def running_turn_id(self, agent_id: str) -> str | None:
        """The latest running or cancelling turn (what loop facts and steers belong to)."""
        ...

    def turn_of_message(self, agent_id: str, message_id: str) -> TurnRecord | None:
        """The turn the latest accepted input with this message id belongs to."""
        ...

    def turn_message_ids(self, agent_id: str, turn_id: str) -> list[str]:
        """The message ids of the turn's inputs, in acceptance order."""
        ...

    def turn_inputs_queued(self, agent_id: str, turn_id: str) -> bool:
        """True while an input of the turn still waits in a queue."""
        ...

    def turn_of_key(
        self, agent_id: str, key: str, delivery: TurnDelivery, input: JSONObject
    ) -> TurnRecord | None:
        """The turn an earlier input with ``key`` made, None for a new key;
        ``IdempotencyConflictError`` if the key was used by a different input."""
        ...

    def session_archived(self, agent_id: str) -> bool:
        """True once the session was archived."""
        ...

    def open_turn(
        self,
        agent_id: str,
        *,
        key: str | None,
        driver: str,
        delivery: TurnDelivery,
        input: JSONObject,
        message_id: str | None,
        input_json: str | None = None,
    ) -> tuple[TurnRecord, bool]:
        """Open a turn for an accepted input, or join the running one (a steer); a repeated
        key returns its turn with ``False`` and writes nothing, or raises
        ``IdempotencyConflictError`` for a different input. ``input_json``: ``input``'s
        stored JSON, if the caller encoded it already."""
        ...

    def move_turn(
        self,
        agent_id: str,
        turn_id: str,
        status: TurnStatus,
        *,
        result: JSONObject | None = None,
        error: TurnFailure | None = None,
        extra: JSONObject | None = None,
    ) -> TurnRecord:
        """One allowed status move, with its ``turn.<status>`` event; ``TurnStateError``
        otherwise."""
        ...

    def move_turns(
        self,
        agent_id: str,
        status: TurnStatus,
        select: Callable[[TurnRecord], bool],
        **fields: Any,
    ) -> list[TurnRecord]:
        """Move every live turn ``select`` picks that may make the move."""
        ...

    # -- message identities --------------------------------------------------------------
    def claim_message_id(self, agent_id: str, message_id: str) -> bool:
        """Insert-if-absent: False if this id is already durable for the agent."""
        ...

    def release_message_ids(self, agent_id: str, message_ids: list[str]) -> None: ...

    # -- queues --------------------------------------------------------------------------
    def enqueue(self, agent_id: str, message: QueuedMessage) -> QueuedMessage:
        """Append to ``message.queue``; returns the message with its assigned ``seq``."""
        ...

    def queued(self, agent_id: str, queue: QueueName | None = None) -> list[QueuedMessage]:
        """Queued messages in FIFO order (one queue, or both by queue then seq)."""
        ...

    def dequeue(self, agent_id: str, queue: QueueName, seq: int) -> bool:
        """Delete-if-present: the claim that consumes one entry exactly once."""
        ...

    def inject_notice(self, agent_id: str, notice: QueuedNotice) -> QueuedNotice: ...

    def notices(self, agent_id: str) -> list[QueuedNotice]: ...

    def remove_notice(self, agent_id: str, seq: int) -> bool: ...

    # -- tool batches --------------------------------------------------------------------
    def put_pending_calls(self, agent_id: str, calls: list[PendingToolCall]) -> None: ...

    def pending_calls(self, agent_id: str) -> list[PendingToolCall]:
        """In batch order (by ``index``)."""
        ...

    def claim_tool_result(self, agent_id: str, internal_id: str, result: ToolResultMessage) -> bool:
        """First-writer-wins result claim for one call."""
        ...

    def tool_result_claim(self, agent_id: str, internal_id: str) -> ToolResultMessage | None: ...

    def mark_call_committed(
        self, agent_id: str, internal_id: str, result: ToolResultMessage
    ) -> bool:
        """Record a result a tool committed early; False if the call is not pending."""
        ...

    def remove_pending_call(self, agent_id: str, internal_id: str) -> bool:
        """Delete the pending entry and its result claim; False if it was already gone."""
        ...

    # -- per-agent facts -----------------------------------------------------------------
    def read_settings(self, agent_id: str) -> Settings | None: ...

    def write_settings(self, agent_id: str, settings: Settings) -> None: ...

    def read_owed(self, agent_id: str) -> OwedWork | None: ...

    def write_owed(self, agent_id: str, owed: OwedWork) -> None:
        """Upsert; an identical value is not rewritten."""
        ...

    def claim_owed(self, agent_id: str, owed: OwedWork) -> bool:
        """Insert-if-absent: True if this write created the fact (the agent was settled)."""
        ...

    def delete_owed(self, agent_id: str) -> bool: ...

    def agents_owing_work(self) -> list[str]:
        """Ids of live agents with an owed-work fact (an index scan)."""
        ...

    def read_context_tokens(self, agent_id: str) -> int | None: ...

    def write_context_tokens(self, agent_id: str, tokens: int | None) -> None: ...

    # -- sorted key-value table (scoped stores build on it) ------------------------------
    def kv_read(self, key: str) -> Any | None: ...

    def kv_list(self, prefix: str) -> list[tuple[str, Any]]:
        """Entries whose key starts with ``prefix``, in key order."""
        ...

    def kv_write(self, key: str, value: Any) -> None: ...

    def kv_delete(self, key: str) -> bool: ...

    def kv_clear(self, prefix: str) -> int:
        """Delete every key starting with ``prefix``; returns how many."""
        ...

    def kv_write_if_absent(self, key: str, value: Any) -> bool: ...

    def kv_compare_and_set(self, key: str, expected: Any | None, value: Any) -> bool: ...

    def kv_delete_if_present(self, key: str) -> bool: ...


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
