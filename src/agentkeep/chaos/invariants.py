"""The invariants (docs/invariants.md), pure functions of durable state and the side-effect ledger.

Each check returns the :class:`Violation` values it finds; :class:`~agentkeep.chaos.checker.
Checker` runs them after every simulated process. Nothing here reads memory or logs.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec

from agentkeep.chaos.process import DurableState, ProcessReport, archived_users
from agentkeep.providers.responding import count_conversation
from agentkeep.types import (
    AssistantMessage,
    CompactionMessage,
    ReasoningBlock,
    Settings,
    TextBlock,
    ToolCallBlock,
)
from agentkeep.types.records import (
    BlockRecord,
    CompactionRecord,
    ConversationRecord,
    SystemRecord,
    ToolRecord,
    UserRecord,
    rebuild_messages,
)

if TYPE_CHECKING:
    from agentkeep.chaos.world import ChaosWorld

_CALL = re.compile(r"^call-(\d+)$")

INVARIANTS: dict[int | str, str] = {
    1: "each accepted message reaches the conversation exactly once",
    3: "each queue keeps its acceptance order",
    6: "owed work is durable until the agent settles owing nothing",
    9: "results land in call order, each with the removal of its pending entry",
    10: "unique call ids, exactly one result per call, after its call",
    11: "no unanswered call behind later records",
    12: "a non-durable tool runs at most once per call",
    13: "nothing is reported finished before it is durable",
    14: "compaction is whole or not at all, and answers nothing by itself",
    15: "a model switch lands wholly on one side",
    18: "close and delete admit nothing new and answer everything admitted",
    20: "no operation deadlocks: each returns or refuses promptly",
    23: "one owner per store, its lock held until every agent closed and no longer",
    26: "history is never deleted: what leaves the provider's view is archived (issue 12)",
    # The continuation (docs/lifecycle.md): a response cut short is continued.
    "C1": "a provider request never ends with the model's own message",
    "C2": "no settled history ends with a response cut short",
    # The session event ledger (docs/ledger.md), checked by agentkeep.chaos.ledger_checks.
    "L1": "ledger sequences are dense from 1 and increasing",
    "L2": "every committed fact has its event and every event its fact",
    "L3": "ledger events are never changed: each snapshot extends the previous one",
    "L4": "a subscriber reconnecting from any sequence receives exactly the suffix",
    # Turns (docs/turns.md), checked by agentkeep.chaos.turn_checks.
    "T1": "every turn has exactly one terminal state or is still live",
    "T2": "a terminal turn state never changes across a reopen",
    "T3": "every turn's input event is in the same ledger",
    "T4": "an idempotency key never maps to two turns nor runs a driver twice",
    "T5": "a completed turn's result is its whole answer, as the transcript shows it",
    # Transactional tools (invariant I18), checked by agentkeep.chaos.checker.
    "X1": "a transactional tool's writes commit with its result or not at all",
    "X2": "a call whose result was committed (ctx.commit) never runs again",
}


class Violation(msgspec.Struct, frozen=True, kw_only=True):
    """One broken promise: the invariant, where it was seen, and what was wrong."""

    invariant: int | str
    process: int
    detail: str

    def describe(self) -> str:
        """One line: the invariant (base-spec number or ``L`` name, and its name), the process
        after which it broke, and the detail.
        """
        name = INVARIANTS.get(self.invariant, "")
        label = f"§7.{self.invariant}" if isinstance(self.invariant, int) else self.invariant
        return f"{label} ({name}) after process {self.process}: {self.detail}"


class SwitchExpectation(msgspec.Struct, frozen=True, kw_only=True):
    """A campaign's model or profile switch: the messages before it, those switching, and
    the target (a profile change resets the history like an incompatible model does)."""

    old_ids: frozenset[str]
    new_ids: frozenset[str]
    provider: str
    model: str
    profile: str | None = None

    def reached(self, settings: Settings | None) -> bool:
        """Whether ``settings`` are the switch's target selection."""
        return settings is not None and (settings.provider, settings.model, settings.profile) == (
            self.provider,
            self.model,
            self.profile,
        )


def describe_records(records: Sequence[ConversationRecord]) -> str:
    """The kinds of the first 12 records, in order (``user assistant tool ...``), for a violation's
    detail.
    """
    return " ".join(type(r).__name__.removesuffix("Record").lower() for r in records[:12])


# -- what holds at every durable point -------------------------------------------------------


def check_state(
    world: ChaosWorld,
    state: DurableState,
    *,
    process: int,
    switch: SwitchExpectation | None = None,
    aborted: bool = False,
) -> list[Violation]:
    """Invariants that hold after any process, however it died. ``aborted``: the process
    aborted a turn, which may settle with its last message unanswered."""
    found: list[Violation] = []

    def bad(invariant: int, detail: str) -> None:
        found.append(Violation(invariant=invariant, process=process, detail=detail))

    offered = {o.id: o for o in world.offers}
    users = [r.message_id for r in state.records if isinstance(r, UserRecord)]
    queued_list = [q.id for q in state.queued]
    queued = set(queued_list)
    # invariant I1: exactly once
    for message_id, count in Counter(users).items():
        if count > 1:
            bad(1, f"message {message_id!r} is in the conversation {count} times")
    for message_id, count in Counter(queued_list).items():
        if count > 1:
            bad(1, f"message {message_id!r} is queued {count} times")
    for message_id in set(users) & queued:
        bad(1, f"message {message_id!r} is both consumed and still queued")
    for message_id in set(users) | queued:
        if message_id not in offered:
            bad(1, f"message {message_id!r} was never offered")
    # A switch or a compaction archives what it takes out of view (invariant I23): an accepted
    # message is queued, in the conversation, or in an archived epoch — never gone.
    # A steer still waiting when the turn it joined was cancelled went with that turn
    # (docs/turns.md: a cancel stops everything the turn joined).
    archived = archived_users(state)
    kept = queued | archived | set(state.taken_back)
    for message_id in world.accept_order:
        if message_id not in users and message_id not in kept:
            bad(1, f"accepted message {message_id!r} is neither queued, consumed nor archived")
    # invariant I3: per-queue order
    if world.order_known:
        rank = {message_id: i for i, message_id in enumerate(world.accept_order)}
        for queue in ("steering", "send"):
            sequence = [
                m for m in users + queued_list if m in offered and offered[m].queue == queue
            ]
            ranks = [rank.get(m, -1) for m in sequence]
            if ranks != sorted(ranks):
                bad(3, f"{queue} queue consumed out of acceptance order: {sequence}")
    found += _check_calls(world, state, process)
    found += _check_owed(state, process, aborted=aborted)
    found += _check_continued(world, state, process, aborted=aborted)
    found += _check_compaction(state, process)
    if switch is not None:
        found += _check_switch(state, switch, process)
    return found


def _check_calls(world: ChaosWorld, state: DurableState, process: int) -> list[Violation]:
    found: list[Violation] = []

    def bad(invariant: int, detail: str) -> None:
        found.append(Violation(invariant=invariant, process=process, detail=detail))

    records = state.records
    calls: dict[str, int] = {}
    answered: dict[str, int] = {}
    for position, record in enumerate(records):
        if isinstance(record, BlockRecord) and isinstance(record.block, ToolCallBlock):
            call = record.block
            if call.call_id in calls:
                bad(10, f"call id {call.call_id!r} issued twice")
            calls[call.call_id] = position
            match = _CALL.match(call.call_id)
            if match is not None:
                expected = world.durable_tools if int(match[1]) % 2 == 0 else world.fragile_tools
                if call.name not in expected:
                    bad(
                        10,
                        f"{call.call_id} calls {call.name!r}, expected one of {sorted(expected)}",
                    )
        elif isinstance(record, ToolRecord):
            call_id = record.message.call_id
            if call_id not in calls:
                bad(10, f"result for {call_id!r} without its call")
            elif call_id in answered:
                bad(10, f"call {call_id!r} answered twice")
            else:
                # invariant I14: results land in call order, so every call before this one (in its
                # batch, and in the batches before it) is already answered.
                skipped = [c for c, p in calls.items() if p < calls[call_id] and c not in answered]
                if skipped:
                    bad(
                        9,
                        f"result for {call_id!r} landed before the result of earlier "
                        f"call(s) {skipped} (results land in call order)",
                    )
            answered[call_id] = position
    pending_ids = {p.call.call_id for p in state.pending}
    for call_id in pending_ids:
        if call_id in answered:
            bad(9, f"call {call_id!r} has a result and is still pending")
        if call_id not in calls:
            bad(8, f"pending call {call_id!r} is not in the conversation")
    for call_id, position in calls.items():
        if call_id in answered:
            continue
        later = records[position + 1 :]
        index = 0
        while index < len(later) and isinstance(later[index], BlockRecord):
            index += 1  # the rest of the same response
        behind = [r for r in later[index:] if not isinstance(r, ToolRecord)]
        if behind:
            bad(
                11, f"unanswered call {call_id!r} behind later records ({describe_records(behind)})"
            )
    return found


def _check_owed(state: DurableState, process: int, *, aborted: bool) -> list[Violation]:
    if state.owed is not None:
        return []
    reasons: list[str] = []
    if state.queued:
        reasons.append(f"{len(state.queued)} queued message(s)")
    if state.notices:
        reasons.append(f"{len(state.notices)} notice(s)")
    if state.pending:
        reasons.append(f"{len(state.pending)} pending call(s)")
    last = state.records[-1] if state.records else None
    if aborted:
        pass  # an aborted turn may settle with its last message unanswered
    elif isinstance(last, UserRecord | ToolRecord) or (
        isinstance(last, SystemRecord) and last.reason == "failure"
    ):
        reasons.append(f"an unanswered {type(last).__name__}")
    if isinstance(last, BlockRecord) and isinstance(last.block, ToolCallBlock):
        reasons.append("an unanswered tool call")
    if not reasons:
        return []
    return [
        Violation(
            invariant=6, process=process, detail=f"settled (no owed fact) with {', '.join(reasons)}"
        )
    ]


def _check_continued(
    world: ChaosWorld, state: DurableState, process: int, *, aborted: bool
) -> list[Violation]:
    """C2: the campaigns' model never ends a response with its reasoning, so a reasoning block
    that ends a settled history, or that a consumed ``send`` message directly follows, is a
    response a crash cut short that was never continued (it is continued after
    "Continue from where you left off." before any send is consumed; steering may come
    first). An abort may settle a cut response: a campaign that aborted is exempt."""
    if aborted or any(report.aborted for report in world.reports):
        return []
    records = state.records
    offered = {o.id: o.queue for o in world.offers}
    for index, record in enumerate(records):
        if not (isinstance(record, BlockRecord) and isinstance(record.block, ReasoningBlock)):
            continue
        following = records[index + 1] if index + 1 < len(records) else None
        if following is None and state.owed is None:
            detail = "settled over a response cut short after its reasoning (never continued)"
        elif isinstance(following, UserRecord) and offered.get(following.message_id) == "send":
            detail = (
                f"send message {following.message_id!r} consumed right after a response cut "
                "short after its reasoning (never continued)"
            )
        else:
            continue
        return [Violation(invariant="C2", process=process, detail=detail)]
    return []


def _check_compaction(state: DurableState, process: int) -> list[Violation]:
    found: list[Violation] = []
    positions = [i for i, r in enumerate(state.records) if isinstance(r, CompactionRecord)]
    if len(positions) > 1 or (positions and positions[0] != 0):
        found.append(
            Violation(
                invariant=14,
                process=process,
                detail=f"compaction records at positions {positions} (at most one, first)",
            )
        )
    if positions:
        head = state.records[0]
        assert isinstance(head, CompactionRecord)
        if not head.messages:
            found.append(Violation(invariant=14, process=process, detail="empty replacement"))
        following = state.records[1] if len(state.records) > 1 else None
        ends_in_summary = bool(head.messages) and isinstance(head.messages[-1], CompactionMessage)
        if ends_in_summary and not head.owes_answer and isinstance(following, BlockRecord):
            found.append(
                Violation(
                    invariant=14,
                    process=process,
                    detail="a response answers a standalone compaction (an invented answer)",
                )
            )
    return found


def _check_switch(state: DurableState, switch: SwitchExpectation, process: int) -> list[Violation]:
    users = {r.message_id for r in state.records if isinstance(r, UserRecord)}
    settings = state.settings
    switched = switch.reached(settings)
    old = users & switch.old_ids
    new = users & switch.new_ids
    problems: list[str] = []
    if new and old:
        problems.append(f"old messages {sorted(old)} under the new ones {sorted(new)}")
    if switched and old:
        problems.append(f"old messages {sorted(old)} under the new model {switch.model}")
    if new and not switched:
        problems.append(f"switch messages {sorted(new)} consumed under {settings}")
    found = [Violation(invariant=15, process=process, detail=p) for p in problems]
    # The reset restarted what the provider sees; the old conversation must stay readable
    # in an epoch archived by the switch (invariant I23), never be deleted.
    kept = {
        r.message_id
        for epoch in state.archived
        if epoch.reason == "model_switch"
        for r in epoch.records
        if isinstance(r, UserRecord)
    }
    lost = sorted(switch.old_ids - kept - users) if new else []
    if lost:
        found.append(
            Violation(
                invariant=26,
                process=process,
                detail=f"the switch deleted old messages {lost} instead of archiving them",
            )
        )
    return found


# -- the ledger ----------------------------------------------------------------------------------


def check_ledger(world: ChaosWorld, process: int) -> list[Violation]:
    """I17: a non-durable (fragile) tool ran at most once per call; a violation for each call the
    ledger shows running twice or more.
    """
    counts = Counter(
        (e.tool, e.call_id) for e in world.ledger.entries if e.tool in world.fragile_tools
    )
    return [
        Violation(
            invariant=12,
            process=process,
            detail=f"non-durable {tool} ran {count} times for {call_id}",
        )
        for (tool, call_id), count in sorted(counts.items())
        if count > 1
    ]


def check_commits(world: ChaosWorld, process: int) -> list[Violation]:
    """X2: once an execution's ``ctx.commit`` won, its call is never executed again (the
    batch reuses the committed result, after a crash too)."""
    entries = world.ledger.entries
    found = []
    for commit in world.ledger.commits:
        key = (commit.agent_id, commit.tool, commit.call_id)
        runs = [e for e in entries if (e.agent_id, e.tool, e.call_id) == key]
        # By identity: two executions of one call in one process are equal entries.
        at = next((i for i, e in enumerate(runs) if e is commit), len(runs))
        later = runs[at + 1 :]
        if later:
            found.append(
                Violation(
                    invariant="X2",
                    process=process,
                    detail=(
                        f"{commit.tool} committed {commit.call_id}'s result in process "
                        f"{commit.generation}, then ran it again in process {later[0].generation}"
                    ),
                )
            )
    return found


# -- the end -------------------------------------------------------------------------------------


def check_final(
    world: ChaosWorld,
    state: DurableState,
    report: ProcessReport,
    *,
    switch: SwitchExpectation | None = None,
) -> list[Violation]:
    """After the last, healthy process: settled owing nothing, everything answered."""
    found: list[Violation] = []

    def bad(invariant: int, detail: str) -> None:
        found.append(Violation(invariant=invariant, process=report.generation, detail=detail))

    if not report.idle:
        bad(6, "the healthy final process never became idle")
    if state.owed is not None:
        bad(6, f"still owes work at the end: {state.owed}")
    if state.queued:
        bad(6, f"messages still queued at the end: {[q.id for q in state.queued]}")
    if state.notices:
        bad(6, f"notices still queued at the end: {len(state.notices)}")
    if state.pending:
        bad(6, f"calls still pending at the end: {[p.call.call_id for p in state.pending]}")
    missing = [o.id for o in world.offers if o.id not in world.accept_order]
    if missing:
        bad(1, f"messages never accepted by a healthy process: {missing}")
    records = state.records
    calls = {
        r.block.call_id
        for r in records
        if isinstance(r, BlockRecord) and isinstance(r.block, ToolCallBlock)
    }
    results = {r.message.call_id for r in records if isinstance(r, ToolRecord)}
    if calls - results:
        bad(10, f"calls never answered: {sorted(calls - results)}")
    messages = rebuild_messages(list(records))
    users, _ = count_conversation(tuple(messages))
    offered = len(world.offers) - len(set(state.taken_back))  # the taken back never run
    expected = len(switch.new_ids) if switch is not None else offered
    if users != expected:
        bad(1, f"{users} user messages in the conversation, {expected} offered")
    last = messages[-1] if messages else None
    answer = f"answer-{expected}"
    if isinstance(last, AssistantMessage):
        block = last.content[-1] if last.content else None
        if not (isinstance(block, TextBlock) and block.text == answer):
            bad(6, f"the final response is {block!r}, expected {answer!r}")
    elif not isinstance(last, CompactionMessage):
        bad(6, f"the conversation ends in {type(last).__name__}, expected {answer!r}")
    if switch is not None:
        settings = state.settings
        if not switch.reached(settings):
            target = f"{switch.provider}/{switch.model} (profile {switch.profile!r})"
            bad(15, f"final settings {settings} are not {target}")
    return found


__all__ = [
    "INVARIANTS",
    "SwitchExpectation",
    "Violation",
    "check_final",
    "check_ledger",
    "check_state",
    "describe_records",
]
