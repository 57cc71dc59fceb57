"""Deliberately broken runtimes the checks must catch (tests only).

A check that cannot fail is no check: each mutant here breaks one promise of docs/invariants.md on
purpose, and a test runs a campaign (or the property machine) under it and expects a catch.

:func:`results_in_finish_order` breaks I14: a tool batch commits each result as soon as its
call finishes, so a later call that finishes first lands before an earlier one.

:func:`settles_over_a_truncated_answer` turns off the
continuation (docs/lifecycle.md): a response a crash cut after its first block is never continued —
the resume ignores the owed fact's open response and adds no continue notice, so the cut
answer may become final (C2) or a request may end with the model's own message (C1).

More break the session event ledger (``docs/ledger.md``; the checks are ``L1``–``L4``
in :mod:`agentkeep.chaos.ledger_checks`), most by patching
:meth:`LedgerStatements.append <agentkeep.persistence.ledger.LedgerStatements.append>`:
:func:`accepted_event_in_second_transaction` (L2 under crashes and power cuts),
:func:`settled_event_skipped` (L2), :func:`old_event_rewritten_on_compaction` (L3),
:func:`first_event_retimed_on_acceptance` (L3 alone: the facts still match),
:func:`sequence_gap_at_each_batch` and :func:`sequence_gap_at_each_acceptance` (L1);
:func:`ledger_kept_across_recreate` patches ``create_agent`` (L2: a re-created id inherits
its previous life's events); :func:`subscription_resumes_one_late` (a gap) and
:func:`subscription_resumes_one_early` (a duplicate) patch
:class:`~agentkeep.persistence.ledger.Subscription` (L4).

:func:`transactional_writes_outside_the_transaction` breaks ``X1`` (transactional
tools): the tool's writes commit one by one, outside the transaction that claims its result;
:func:`committed_results_run_again` breaks ``X2``: a call whose result its tool committed
early (``ctx.commit``) runs again after a restart.

:data:`LEDGER_MUTANTS` names them, with the turn mutants of
:mod:`agentkeep.chaos._mutants.turns` (``T1``–``T4``), so a campaign can install one in a
child process (``process_kills``) or in a pool worker (``power_loss``) by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import msgspec

from agentkeep.actors.tool_runner import ToolRunner
from agentkeep.chaos._mutants.patching import patched
from agentkeep.chaos._mutants.turns import (
    completion_overwrites_earlier_results,
    input_event_without_turn_id,
    retried_key_opens_second_turn,
    terminal_turn_event_appended_twice,
)
from agentkeep.loop import inference, transitions
from agentkeep.loop.batch import ToolBatch
from agentkeep.persistence.agents import AgentStatements
from agentkeep.persistence.codec import now_ms
from agentkeep.persistence.ledger import LedgerStatements, Subscription, encode_event_data
from agentkeep.runtime.tool_claims import claim_result
from agentkeep.types import ToolResultMessage
from agentkeep.types.records import AgentRow, PendingToolCall


@contextmanager
def results_in_finish_order() -> Iterator[None]:
    """While active, every :class:`~agentkeep.loop.batch.ToolBatch` commits results in the
    order its calls finish (results known when it starts first, in call order) instead of
    call order. Patches the class, so it reaches every agent in this process; not
    thread-safe against a second patch of the same methods."""
    saved = {
        name: getattr(ToolBatch, name)
        for name in ("finish", "next_ready", "is_last", "committed_one")
    }
    original_finish = saved["finish"]
    original_committed = saved["committed_one"]

    def state_of(batch: ToolBatch) -> dict[str, Any]:
        state: dict[str, Any] = batch.__dict__.setdefault(
            "_finish_order", {"finished": [], "committed": set(), "committing": None}
        )
        return state

    def finish(self: ToolBatch, internal_id: str, result: ToolResultMessage) -> bool:
        finished: bool = original_finish(self, internal_id, result)
        if finished:
            state_of(self)["finished"].append(internal_id)
        return finished

    def next_ready(self: ToolBatch) -> tuple[PendingToolCall, ToolResultMessage] | None:
        if self.done:
            return None
        state = state_of(self)
        by_id = {c.internal_id: c for c in self.calls}
        # Finished calls in finish order, then whatever else has a result (known at the
        # start, or answered by an abort) in call order.
        candidates = [*state["finished"], *(c.internal_id for c in self.calls)]
        for internal_id in candidates:
            if internal_id in state["committed"] or internal_id not in self.results:
                continue
            state["committing"] = internal_id
            return by_id[internal_id], self.results[internal_id]
        return None

    def is_last(self: ToolBatch, pending: PendingToolCall) -> bool:
        return self.next_index == len(self.calls) - 1  # the last result to commit

    def committed_one(self: ToolBatch) -> None:
        state = state_of(self)
        if state["committing"] is not None:
            state["committed"].add(state["committing"])
            state["committing"] = None
        original_committed(self)

    patches: dict[str, Any] = {
        "finish": finish,
        "next_ready": next_ready,
        "is_last": is_last,
        "committed_one": committed_one,
    }
    for name, replacement in patches.items():
        setattr(ToolBatch, name, replacement)
    try:
        yield
    finally:
        for name, original in saved.items():
            setattr(ToolBatch, name, original)


AppendEvent = Callable[..., int]


@contextmanager
def _patched_append_event(make: Callable[[AppendEvent], AppendEvent]) -> Iterator[None]:
    """Replace ``LedgerStatements.append`` by ``make(original)`` while active."""
    original: AppendEvent = LedgerStatements.append
    with patched(LedgerStatements, "append", make(original)):
        yield


@contextmanager
def accepted_event_in_second_transaction() -> Iterator[None]:
    """While active, an acceptance's ``message.accepted`` event is not written in the
    acceptance's transaction but by a second one right after its COMMIT (an after-commit
    callback): a crash or a failing store operation between the two leaves an accepted
    message without its event, and the dead process's callback never runs (L2)."""

    def make(original: AppendEvent) -> AppendEvent:
        def append_event(
            self: LedgerStatements, agent_id: str, type: str, data: Any, **options: Any
        ) -> int:
            if type != "message.accepted":
                return original(self, agent_id, type, data, **options)
            statements, text = self._x.statements, encode_event_data(data)
            turn_id = options.get("turn_id")

            def second_transaction() -> None:
                execute = statements.execute
                execute("BEGIN IMMEDIATE")
                try:
                    row = execute(
                        "SELECT coalesce(max(sequence), 0) + 1 FROM session_events "
                        "WHERE agent_id = ?",
                        (agent_id,),
                    ).fetchone()
                    sequence = int(row[0]) if row is not None else 1
                    execute(
                        "INSERT INTO session_events (agent_id, sequence, type, turn_id, "
                        "data_json, created_at_ms) VALUES (?, ?, ?, ?, ?, ?)",
                        (agent_id, sequence, type, turn_id, text, now_ms()),
                    )
                    execute("COMMIT")
                except BaseException:
                    execute("ROLLBACK")
                    raise

            self._x.after_commit(second_transaction)
            return 0

        return append_event

    with _patched_append_event(make):
        yield


@contextmanager
def settled_event_skipped() -> Iterator[None]:
    """While active, settling deletes the owed fact but appends no ``settled`` event (L2)."""

    def make(original: AppendEvent) -> AppendEvent:
        def append_event(
            self: LedgerStatements, agent_id: str, type: str, data: Any, **options: Any
        ) -> int:
            if type == "settled":
                return self.last_sequence(agent_id)
            return original(self, agent_id, type, data, **options)

        return append_event

    with _patched_append_event(make):
        yield


def _past_the_immutability_trigger(
    self: LedgerStatements, statement: str, params: tuple[Any, ...]
) -> None:
    """Run ``statement`` (an UPDATE of ``session_events``) in the writer's transaction past
    the trigger refusing it: on SQLite the trigger is dropped and re-created, on PostgreSQL
    disabled and enabled again, all in that transaction (the ledger is mutable only inside)."""
    statements = self._x.statements
    if statements.dialect.name == "sqlite":
        statements.execute("DROP TRIGGER session_events_are_immutable")
        statements.execute(statement, params)
        statements.execute(
            "CREATE TRIGGER session_events_are_immutable BEFORE UPDATE ON "
            "session_events BEGIN SELECT RAISE(ABORT, 'session events are immutable'); END"
        )
        return
    trigger = "TRIGGER session_events_are_immutable"
    statements.execute(f"ALTER TABLE session_events DISABLE {trigger}")
    statements.execute(statement, params)
    statements.execute(f"ALTER TABLE session_events ENABLE {trigger}")


@contextmanager
def old_event_rewritten_on_compaction() -> Iterator[None]:
    """While active, a compaction's transaction also rewrites the session's first event (its
    data replaced by the compaction's epoch), past the immutability trigger it drops and
    re-creates in the same transaction (L3: the next reopen sees a changed prefix)."""

    def make(original: AppendEvent) -> AppendEvent:
        def append_event(
            self: LedgerStatements, agent_id: str, type: str, data: Any, **options: Any
        ) -> int:
            sequence = original(self, agent_id, type, data, **options)
            if type == "compaction":
                _past_the_immutability_trigger(
                    self,
                    "UPDATE session_events SET data_json = ? WHERE agent_id = ? AND sequence = 1",
                    (encode_event_data({"rewritten_by_compaction": data.get("epoch")}), agent_id),
                )
            return sequence

        return append_event

    with _patched_append_event(make):
        yield


def _sequence_gap_at(event_type: str) -> AbstractContextManager[None]:
    """Each ``event_type`` event takes the sequence after the next one (a hole, L1)."""

    def make(original: AppendEvent) -> AppendEvent:
        def append_event(
            self: LedgerStatements, agent_id: str, type: str, data: Any, **options: Any
        ) -> int:
            if type != event_type:
                return original(self, agent_id, type, data, **options)
            sequence = self.last_sequence(agent_id) + 2
            self._x.statements.execute(
                "INSERT INTO session_events (agent_id, sequence, type, data_json, "
                "created_at_ms) VALUES (?, ?, ?, ?, ?)",
                (agent_id, sequence, type, encode_event_data(data), now_ms()),
            )
            self.noted_sequence(agent_id, sequence)
            return sequence

        return append_event

    return _patched_append_event(make)


@contextmanager
def sequence_gap_at_each_batch() -> Iterator[None]:
    """While active, each ``tool.batch`` event takes the sequence after the next one, leaving
    a hole in the session's sequence (L1)."""
    with _sequence_gap_at("tool.batch"):
        yield


@contextmanager
def sequence_gap_at_each_acceptance() -> Iterator[None]:
    """While active, each ``message.accepted`` event takes the sequence after the next one
    (L1; for campaigns without tool batches: ``power_loss``, ``lifecycle_races``)."""
    with _sequence_gap_at("message.accepted"):
        yield


@contextmanager
def first_event_retimed_on_acceptance() -> Iterator[None]:
    """While active, every acceptance after the first also rewrites the session's first
    event's ``created_at_ms`` (past the immutability trigger, dropped and re-created in the
    same transaction). Every fact still has its event (L2 holds): only the comparison with
    an earlier read of the ledger (L3) — or a subscriber's copy (L4) — can tell."""

    def make(original: AppendEvent) -> AppendEvent:
        def append_event(
            self: LedgerStatements, agent_id: str, type: str, data: Any, **options: Any
        ) -> int:
            sequence = original(self, agent_id, type, data, **options)
            if type == "message.accepted" and sequence > 1:
                _past_the_immutability_trigger(
                    self,
                    "UPDATE session_events SET created_at_ms = created_at_ms + 1 "
                    "WHERE agent_id = ? AND sequence = 1",
                    (agent_id,),
                )
            return sequence

        return append_event

    with _patched_append_event(make):
        yield


@contextmanager
def ledger_kept_across_recreate() -> Iterator[None]:
    """While active, re-creating a deleted id keeps its previous life's events: they are
    read before the wipe and written back under the new agents row (L2: the new session
    reports acceptances it has no fact for)."""
    original = AgentStatements.create

    def create_agent(self: AgentStatements, row: AgentRow, *, partition: int = 0) -> bool:
        execute = self._x.statements.execute
        kept = execute(
            "SELECT sequence, type, turn_id, data_json, created_at_ms FROM session_events "
            "WHERE agent_id = ?",
            (row.id,),
        ).fetchall()
        created = original(self, row, partition=partition)
        if created:
            for old in kept:
                execute(
                    "INSERT INTO session_events (agent_id, sequence, type, turn_id, data_json, "
                    "created_at_ms) VALUES (?, ?, ?, ?, ?, ?)",
                    (row.id, *old),
                )
        return created

    with patched(AgentStatements, "create", create_agent):
        yield


@contextmanager
def transactional_writes_outside_the_transaction() -> Iterator[None]:
    """While active, a transactional tool runs like an ordinary one — each of its writes its
    own transaction, in the call's thread — and only its result is claimed afterwards, in a
    transaction of its own (X1: a crash between the two leaves the writes without the
    result)."""

    def outside(self: ToolRunner, run: Any, info: Any, cancel: Any, ids: Any, settings: Any) -> Any:
        outcome = self._execute_plain(run, info, cancel, ids, settings)
        if not outcome.is_error:
            result = ToolResultMessage(call_id=run.call.call_id, content=outcome.content)
            agent_id, internal_id = self._agent_id, run.internal_id
            self._contexts.store.transact(
                lambda tx: claim_result(tx, agent_id, internal_id, result)
            )
        return outcome

    with patched(ToolRunner, "_execute_in_transaction", outside):
        yield


@contextmanager
def committed_results_run_again() -> Iterator[None]:
    """While active, a batch ignores the results its tools committed early (``ctx.commit``)
    and runs those calls again (X2: a crash after the commit shows it). A resumed call's own
    question to the writer (``ToolRunner._committed_meanwhile``, the fence) forgets them too:
    the mutant is the runtime forgetting committed results, at every layer."""
    original = ToolBatch.__init__

    def init(self: ToolBatch, calls: tuple[PendingToolCall, ...], *, resumed: bool) -> None:
        forgotten = tuple(msgspec.structs.replace(c, committed=None) for c in calls)
        original(self, forgotten, resumed=resumed)

    with (
        patched(ToolBatch, "__init__", init),
        patched(ToolRunner, "_committed_meanwhile", never_committed_meanwhile),
    ):
        yield


def never_committed_meanwhile(runner: ToolRunner, run: Any) -> None:
    """A resumed call's check on the writer, forgotten: it always runs (mutants only)."""


@contextmanager
def subscription_resumes_one_late() -> Iterator[None]:
    """While active, a subscription opened with ``after > 0`` starts one event late: the
    event right after ``after`` is never handed out (L4)."""
    original = Subscription.__init__

    def init(self: Subscription, agent_id: str, after: int, *args: Any, **kwargs: Any) -> None:
        original(self, agent_id, after + 1 if after > 0 else after, *args, **kwargs)

    with patched(Subscription, "__init__", init):
        yield


@contextmanager
def subscription_resumes_one_early() -> Iterator[None]:
    """While active, a subscription opened with ``after > 0`` starts one event early: the
    event at ``after`` — which the subscriber already has — is handed out again (L4)."""
    original = Subscription.__init__

    def init(self: Subscription, agent_id: str, after: int, *args: Any, **kwargs: Any) -> None:
        original(self, agent_id, after - 1 if after > 0 else after, *args, **kwargs)

    with patched(Subscription, "__init__", init):
        yield


@contextmanager
def settles_over_a_truncated_answer() -> Iterator[None]:
    """While active, every loop forgets that a response was cut short: the load drops the
    owed fact's ``response_open`` and no request is preceded by the continue notice (breaking
    ``C1`` and ``C2``). Patches module globals, so it reaches every agent in this
    process; not thread-safe against a second patch of the same functions."""
    original_loaded = transitions.loaded

    def never(records: object) -> bool:
        return False

    def loaded(ctx: Any, snapshot: Any) -> None:
        owed = snapshot.owed
        if owed is not None and owed.response_open:
            owed = msgspec.structs.replace(owed, response_open=False)
            snapshot = msgspec.structs.replace(snapshot, owed=owed)
        original_loaded(ctx, snapshot)

    patches = [
        (transitions, "loaded", loaded),
        (transitions, "ends_with_own_message", never),
        (inference, "ends_with_own_message", never),
    ]
    saved = [(module, name, getattr(module, name)) for module, name, _ in patches]
    for module, name, value in patches:
        setattr(module, name, value)
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


@contextmanager
def answer_is_the_continuation_alone() -> Iterator[None]:
    """While active, a continuation's answer and assistant message hold its own blocks only
    (breaking invariant I36): the cut response it continues is in neither, so
    a turn cut after its answer's block completes with less than the transcript shows
    (``T5``). Patches a module global, so it reaches every agent in this process."""

    def nothing(records: object) -> tuple[()]:
        return ()

    with patched(inference, "continued_blocks", nothing):
        yield


Mutant = Callable[[], AbstractContextManager[None]]

# The ledger mutants by name (a child process or a pool worker installs one by name).
LEDGER_MUTANTS: dict[str, Mutant] = {
    mutant.__name__: mutant
    for mutant in (
        accepted_event_in_second_transaction,
        settled_event_skipped,
        old_event_rewritten_on_compaction,
        first_event_retimed_on_acceptance,
        sequence_gap_at_each_batch,
        sequence_gap_at_each_acceptance,
        ledger_kept_across_recreate,
        subscription_resumes_one_late,
        subscription_resumes_one_early,
        terminal_turn_event_appended_twice,
        completion_overwrites_earlier_results,
        input_event_without_turn_id,
        retried_key_opens_second_turn,
        answer_is_the_continuation_alone,
    )
}


__all__ = [
    "LEDGER_MUTANTS",
    "Mutant",
    "accepted_event_in_second_transaction",
    "answer_is_the_continuation_alone",
    "committed_results_run_again",
    "first_event_retimed_on_acceptance",
    "ledger_kept_across_recreate",
    "old_event_rewritten_on_compaction",
    "results_in_finish_order",
    "sequence_gap_at_each_acceptance",
    "sequence_gap_at_each_batch",
    "settled_event_skipped",
    "settles_over_a_truncated_answer",
    "subscription_resumes_one_early",
    "subscription_resumes_one_late",
    "transactional_writes_outside_the_transaction",
]
