"""The invariant checker (docs/invariants.md): judged from durable state and the side-effect ledger.

:class:`Checker` follows a campaign: after every simulated process it reads the disk through a
fresh open (:meth:`ChaosWorld.durable <agentkeep.chaos.world.ChaosWorld.durable>`) and checks
what must hold at *every* durable point (well-formed history, exactly-once, queue order, owed
work recorded, compaction whole or not at all, a switch on one side) and the session event
ledger's ``L1``–``L3`` (:mod:`agentkeep.chaos.ledger_checks`: dense, one event per fact and
one fact per event, never changed between reopens) and the turns' ``T1``–``T4``
(:mod:`agentkeep.chaos.turn_checks`); after the final healthy process it also
checks that the agent settled owing nothing with the expected final answer. Each broken
promise is a :class:`Violation` naming the invariant (or ledger ``L`` name) it breaks.
"""

from __future__ import annotations

from agentkeep.chaos.invariants import (
    INVARIANTS,
    SwitchExpectation,
    Violation,
    check_commits,
    check_final,
    check_ledger,
    check_state,
    describe_records,
)
from agentkeep.chaos.ledger_checks import check_events, check_prefix
from agentkeep.chaos.process import DurableState, ProcessReport, history_log
from agentkeep.chaos.turn_checks import check_turns
from agentkeep.chaos.world import ChaosWorld
from agentkeep.providers.responding import count_conversation
from agentkeep.types import SessionEvent
from agentkeep.types.records import (
    CompactionRecord,
    ConversationRecord,
    UserRecord,
    rebuild_messages,
)


class Checker:
    """Checks a campaign after each process and at its end."""

    def __init__(self, world: ChaosWorld, *, switch: SwitchExpectation | None = None) -> None:
        self.world = world
        self.switch = switch
        self.previous: DurableState | None = None
        self.seen: set[str] = set()
        # The ledger as read at the previous reopen: the next one must extend it (L3).
        self.events: list[SessionEvent] = []
        self.violations: list[Violation] = []
        # An aborted turn may settle with its last message unanswered; that tail
        # is exempt from the owed check until something is appended after it.
        self._aborted_tail: tuple[int, ConversationRecord] | None = None

    def after_process(self, report: ProcessReport, *, final: bool = False) -> list[Violation]:
        """Check the disk after ``report``'s process closed; ``final`` adds the end checks."""
        state, events = self.world.durable_with_events()
        tail = (len(state.records), state.records[-1]) if state.records else None
        exempt = report.aborted or (tail is not None and tail == self._aborted_tail)
        if report.aborted and state.owed is None:
            self._aborted_tail = tail
        found = check_state(
            self.world,
            state,
            process=report.generation,
            switch=self.switch,
            aborted=exempt,
        )
        found += [
            Violation(invariant=number, process=report.generation, detail=detail)
            for number, detail in report.live_violations
        ]
        found += self._continuity(state, report.generation)
        found += _transactional_writes(state, report.generation)
        found += check_ledger(self.world, report.generation)
        found += check_commits(self.world, report.generation)
        found += check_events(state, events, process=report.generation)
        found += check_prefix(self.events, events, process=report.generation)
        previous = self.previous.turns if self.previous is not None else ()
        settled = final and state.owed is None and not state.queued
        found += check_turns(
            state.turns, events, previous, process=report.generation, settled=settled
        )
        self.events = events
        if final:
            found += check_final(self.world, state, report, switch=self.switch)
        self.seen |= {r.message_id for r in state.records if isinstance(r, UserRecord)}
        self.previous = state
        self.violations += found
        return found

    def _continuity(self, state: DurableState, process: int) -> list[Violation]:
        previous = self.previous
        if previous is None:
            return []
        return _nothing_deleted(previous, state, process) + self._one_history(
            previous, state, process
        )

    def _one_history(
        self, previous: DurableState, state: DurableState, process: int
    ) -> list[Violation]:
        before, after = list(previous.records), list(state.records)
        if after[: len(before)] == before:
            return []
        if (
            after
            and isinstance(after[0], CompactionRecord)
            and (not before or after[0] != before[0])
        ):
            return _compaction_continuity(before, after, process)
        switch = self.switch
        if switch is not None and _is_reset(after, switch):
            return []
        return [
            Violation(
                invariant=14,
                process=process,
                detail=(
                    f"history neither appended to, compacted whole, nor reset: "
                    f"{len(before)} records became {len(after)} ({describe_records(after)})"
                ),
            )
        ]


def _nothing_deleted(previous: DurableState, state: DurableState, process: int) -> list[Violation]:
    """Invariant I23: every record once durable is still readable — in the conversation or in an
    archived epoch — in the same order (the archive-then-current log only grows)."""
    before, after = history_log(previous), history_log(state)
    if after[: len(before)] == before:
        return []
    kept = next((i for i, (b, a) in enumerate(zip(before, after, strict=False)) if b != a), None)
    at = len(after) if kept is None else kept
    return [
        Violation(
            invariant=26,
            process=process,
            detail=(
                f"history physically deleted: {len(before)} records ever durable became "
                f"{len(after)}, the first difference at {at} ({describe_records(before[at:])})"
            ),
        )
    ]


def _transactional_writes(state: DurableState, process: int) -> list[Violation]:
    """X1: the transactional chaos tool's call-store write commits in the transaction that
    claims its result, which erases the call store: so no pending call ever holds it."""
    return [
        Violation(
            invariant="X1",
            process=process,
            detail=(
                f"call {internal_id}'s call store holds its transactional tool's write "
                f"({'with' if claimed else 'without'} a claimed result)"
            ),
        )
        for internal_id, claimed in state.call_effects
    ]


def _is_reset(records: list[ConversationRecord], switch: SwitchExpectation) -> bool:
    users = [r.message_id for r in records if isinstance(r, UserRecord)]
    return bool(users) and users[0] in switch.new_ids


def _compaction_continuity(
    before: list[ConversationRecord], after: list[ConversationRecord], process: int
) -> list[Violation]:
    head = after[0]
    assert isinstance(head, CompactionRecord)
    summary = count_conversation(head.messages)
    tail = after[1:]
    for cut in range(len(before) + 1):
        kept = before[cut:]
        erased = count_conversation(tuple(rebuild_messages(before[:cut])))
        if tail[: len(kept)] == kept and erased == summary:
            return []
    had = count_conversation(tuple(rebuild_messages(before)))
    if summary[0] >= had[0] and summary[1] >= had[1]:
        return []
    return [
        Violation(
            invariant=14,
            process=process,
            detail=(
                f"compaction is not a whole replacement: it summarises {summary} "
                f"(users, calls) where the history held {had}"
            ),
        )
    ]


__all__ = [
    "INVARIANTS",
    "Checker",
    "SwitchExpectation",
    "Violation",
    "check_final",
    "check_ledger",
    "check_state",
]
