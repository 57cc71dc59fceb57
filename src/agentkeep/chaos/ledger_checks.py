"""The session event ledger's invariants (``L1``–``L4``), judged from durable state only.

The ledger (``docs/ledger.md``) promises that every committed fact has its event, committed
in the same transaction, in a dense per-session sequence that is never rewritten. The
:class:`~agentkeep.chaos.checker.Checker` reads the ledger through a fresh open after every
simulated process and holds it against the facts of the same snapshot:

- ``L1``: sequences are dense from 1 and increasing.
- ``L2``: every fact has its event and every event its fact: each accepted message id (queued,
  in the conversation, or archived) has exactly as many ``message.accepted`` events as it has
  facts; the records of the archived epochs and the conversation, in order, are exactly the
  ``message``/``assistant.block``/``tool.result``/``failure.note`` events, in order (an
  assistant ``message`` event restates a response, no record of its own); each
  archived compaction epoch has its ``compaction`` event and each model reset its
  ``model.switch``; a settled agent (no owed fact) reported ``settled`` after its last
  acceptance.
- ``L3``: events are never changed: each snapshot extends the previous one (prefix-stable),
  whatever compaction or a model switch did to the conversation.
- ``L4``: a subscriber reconnecting from an arbitrary ``after`` receives exactly the suffix
  (checked in the campaign's final healthy process, :func:`check_subscription`).
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentkeep.chaos.invariants import INVARIANTS, Violation
from agentkeep.chaos.ledger_reads import EVENT_PAGE, read_all
from agentkeep.chaos.process import DurableState, history_log
from agentkeep.types import SessionEvent, ToolCallBlock
from agentkeep.types.records import (
    BlockRecord,
    ConversationRecord,
    SystemRecord,
    ToolRecord,
    UserRecord,
)

if TYPE_CHECKING:
    from agentkeep.agent_system import AgentSystem

LEDGER_INVARIANTS = {k: v for k, v in INVARIANTS.items() if isinstance(k, str)}

_RECORD_TYPES = frozenset({"message", "assistant.block", "tool.result", "failure.note"})
# How long the subscriber thread may take to drain a backlog that is already committed.
_SUBSCRIBER_SECONDS = 20.0


def _record_key(record: ConversationRecord) -> tuple[str, str]:
    """The event type a record is reported by, and the identity both carry."""
    match record:
        case UserRecord(message_id=message_id):
            return "message", message_id
        case BlockRecord(block=ToolCallBlock(call_id=call_id)):
            return "assistant.block", call_id
        case BlockRecord():
            return "assistant.block", ""
        case ToolRecord(message=message):
            return "tool.result", message.call_id
        case SystemRecord(reason="failure"):
            return "failure.note", ""
        case SystemRecord(reason=reason):
            return "message", f"system:{reason}"
    return "message", type(record).__name__


def _event_key(event: SessionEvent) -> tuple[str, str]:
    data = event.data
    match event.type:
        case "message" if data.get("role") == "system" and "reason" in data:
            return "message", f"system:{data['reason']}"
        case "message":
            return "message", str(data.get("message_id", ""))
        case "assistant.block":
            block = data.get("block")
            is_call = isinstance(block, dict) and "call_id" in block and "name" in block
            return "assistant.block", str(block["call_id"]) if is_call else ""  # type: ignore[index]
        case "tool.result":
            return "tool.result", str(data.get("call_id", ""))
    return event.type, ""


def _answer(event: SessionEvent) -> bool:
    """A ``message`` event reporting a complete assistant response: it reports the
    response's blocks once more as a whole (their records have ``assistant.block`` events),
    so it is no record of its own."""
    return event.type == "message" and event.data.get("role") == "assistant"


def check_events(
    state: DurableState, events: Sequence[SessionEvent], *, process: int
) -> list[Violation]:
    """``L1`` and ``L2`` for one snapshot: ``state`` and ``events`` read in the same open."""
    found: list[Violation] = []

    def bad(invariant: str, detail: str) -> None:
        found.append(Violation(invariant=invariant, process=process, detail=detail))

    sequences = [e.sequence for e in events]
    if sequences != list(range(1, len(events) + 1)):
        bad("L1", f"ledger sequences are not dense from 1: {sequences[:20]}")
    kinds = [e.type for e in events]
    # L2: acceptances. An id's facts: queued, in the conversation, or in an archived epoch.
    facts = Counter(q.id for q in state.queued)
    facts.update(r.message_id for r in history_log(state) if isinstance(r, UserRecord))
    facts.update(state.taken_back)  # a cancelled turn's input: its fact is that turn
    reported = Counter(
        str(e.data.get("message_id")) for e in events if e.type == "message.accepted"
    )
    for message_id in sorted(set(facts) | set(reported)):
        if facts[message_id] != reported[message_id]:
            bad(
                "L2",
                f"message {message_id!r} has {facts[message_id]} durable fact(s) but "
                f"{reported[message_id]} message.accepted event(s)",
            )
    # L2: the records, archived epochs first, in order, each with its event.
    # A private block (a server tool with persist_in_history=False) is never published.
    published = [r for r in history_log(state) if not (isinstance(r, BlockRecord) and r.private)]
    expected = [_record_key(r) for r in published]
    got = [_event_key(e) for e in events if e.type in _RECORD_TYPES and not _answer(e)]
    if got != expected:
        at = next(
            (i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b),
            min(len(expected), len(got)),
        )
        bad(
            "L2",
            f"{len(expected)} records ever durable but {len(got)} record events; the first "
            f"difference at {at}: record {expected[at : at + 1]} vs event {got[at : at + 1]}",
        )
    # L2: each archived epoch was reported by the fact that archived it.
    for reason, event_type in (("compaction", "compaction"), ("model_switch", "model.switch")):
        epochs = sorted(e.epoch for e in state.archived if e.reason == reason)
        told = sorted(
            int(e.data["epoch"])
            for e in events
            if e.type == event_type and e.data.get("epoch") is not None
        )
        if epochs != told:
            bad("L2", f"archived {reason} epochs {epochs} but {event_type} events for {told}")
    # L2: settling is reported. Acceptance owes work in its transaction, so an agent owing
    # nothing settled after its last acceptance.
    last_accepted = max((i for i, k in enumerate(kinds) if k == "message.accepted"), default=-1)
    if state.owed is None and last_accepted >= 0 and "settled" not in kinds[last_accepted:]:
        bad("L2", "the agent owes nothing but no settled event follows its last acceptance")
    return found


def check_prefix(
    before: Sequence[SessionEvent], after: Sequence[SessionEvent], *, process: int
) -> list[Violation]:
    """``L3``: the ledger at this reopen extends the ledger at the previous one."""
    if list(after[: len(before)]) == list(before):
        return []
    at = next(
        (i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b),
        len(after),
    )
    was = before[at] if at < len(before) else None
    now = after[at] if at < len(after) else None
    return [
        Violation(
            invariant="L3",
            process=process,
            detail=(
                f"ledger of {len(before)} events became {len(after)}; event {at + 1} changed "
                f"from {was!r} to {now!r}"
            ),
        )
    ]


def check_subscription(
    system: AgentSystem, agent_id: str, *, seed: int, process: int
) -> list[Violation]:
    """``L4``: from a seeded ``after`` (0 or a committed sequence), a subscriber on its own
    thread receives exactly the committed suffix, in order, and nothing more. Call it while
    nothing else commits (the final process, idle)."""
    events = read_all(lambda after: system.events(agent_id, after=after, limit=EVENT_PAGE))
    # A seeded reconnection point: the start, or any committed sequence.
    after = random.Random(seed ^ 0x1ED6E5).choice([0, *(e.sequence for e in events)])
    suffix = [e for e in events if e.sequence > after]
    received: list[SessionEvent] = []
    errors: list[BaseException] = []

    def subscriber() -> None:
        subscription = system.subscribe(agent_id, after=after)
        try:
            for _ in suffix:
                received.append(subscription.next(timeout_seconds=_SUBSCRIBER_SECONDS))
            # Nothing more is committed: one more read must find nothing (no wait).
            with contextlib.suppress(TimeoutError):
                received.append(subscription.next(timeout_seconds=0))
        except BaseException as error:  # reported as the violation below
            errors.append(error)
        finally:
            subscription.close()

    thread = threading.Thread(target=subscriber, name="ledger-subscriber")
    thread.start()
    thread.join(timeout=2 * _SUBSCRIBER_SECONDS)
    if thread.is_alive() or errors or received != suffix:
        got = [e.sequence for e in received]
        why = "still waiting" if thread.is_alive() else repr(errors[0]) if errors else ""
        return [
            Violation(
                invariant="L4",
                process=process,
                detail=(
                    f"a subscriber from after={after} got sequences {got[:20]} where "
                    f"{[e.sequence for e in suffix][:20]} were committed {why}".rstrip()
                ),
            )
        ]
    return []


__all__ = [
    "LEDGER_INVARIANTS",
    "check_events",
    "check_prefix",
    "check_subscription",
]
