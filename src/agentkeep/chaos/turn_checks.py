"""The turns' invariants (``T1``–``T4``, docs/turns.md), judged from durable state only.

The :class:`~agentkeep.chaos.checker.Checker` reads a session's turns in the same snapshot as
its facts and its ledger (``DurableState.turns``) after every process and holds them against
the ledger and against the previous snapshot:

- ``T1``: every turn has exactly one terminal state or is still live: its ``turn.*`` events
  start with ``turn.queued``, every move is one :data:`~agentkeep.types.turns.TRANSITIONS`
  allows, at most one is terminal and nothing follows it, and the row's status is the last
  event's.
- ``T2``: a terminal state never changes across a reopen: a turn terminal in the previous
  snapshot has the same status, result, error and completion time in this one (and is
  still there).
- ``T3``: every turn's input event is in the same ledger: its ``turn.queued`` (same number
  and key) and, for a turn opened by a message, that message's ``message.accepted`` event
  naming the turn; no ``message.accepted`` names a turn that does not exist.
- ``T4``: an idempotency key never maps to two turns, and never runs a driver twice: keys are
  unique among the turns and among their ``turn.queued`` events, and a turn starts running
  at most once (one ``turn.running`` event). Campaigns that retry keys also check what each
  retry returned (:func:`judge_keyed_sends`).
- ``T5``: a completed native turn's result is its whole answer: the assistant message the
  transcript ended with when it completed — read from the ledger's ``assistant.block`` events
  back to the turn's last input, across each cut response and its continuation (a system
  ``message`` with reason ``continue``, and the notices of that boundary) — and the ledger's
  assistant ``message`` of the answering response says the same (:func:`whole_answer`).
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import msgspec

from agentkeep.chaos.invariants import INVARIANTS, Violation
from agentkeep.types import AssistantBlock, JSONObject, SessionEvent
from agentkeep.types.parts import assistant_json
from agentkeep.types.turns import (
    NATIVE_DRIVER,
    TERMINAL_STATUSES,
    TRANSITIONS,
    TURN_EVENT_PREFIX,
    TurnRecord,
)

TURN_INVARIANTS = {k: v for k, v in INVARIANTS.items() if isinstance(k, str) and k[0] == "T"}


def check_turns(
    turns: Sequence[TurnRecord],
    events: Sequence[SessionEvent],
    previous: Sequence[TurnRecord],
    *,
    process: int,
    settled: bool = False,
) -> list[Violation]:
    """``T1``–``T4`` for one snapshot (``turns`` and ``events`` read in the same open);
    ``previous``: the turns of the previous snapshot (for ``T2``). ``settled``: the campaign
    ended with the session owing nothing and nothing queued, so no native turn may still be
    queued or running (it would never reach its terminal state)."""
    found: list[Violation] = []

    def bad(invariant: str, detail: str) -> None:
        found.append(Violation(invariant=invariant, process=process, detail=detail))

    moves: dict[str, list[SessionEvent]] = defaultdict(list)
    for event in events:
        if event.type.startswith(TURN_EVENT_PREFIX):
            moves[str(event.data.get("turn_id"))].append(event)
    by_id = {turn.id: turn for turn in turns}
    for turn in turns:
        _life(turn, moves.get(turn.id, []), bad)
        _inputs(turn, moves.get(turn.id, []), events, bad)
    if settled:
        for turn in turns:
            if turn.driver == NATIVE_DRIVER and turn.status in ("queued", "running"):
                bad("T1", f"turn {turn.number} ({turn.id}) is still {turn.status} at the end")
    for turn_id in sorted(set(moves) - set(by_id)):
        bad("T1", f"turn events {[e.sequence for e in moves[turn_id]]} of no turn {turn_id!r}")
    for event in events:
        named = event.data.get("turn_id") if event.type == "message.accepted" else None
        if named is not None and named not in by_id:
            bad("T3", f"message.accepted #{event.sequence} names turn {named!r}, which is not")
    # T2: what was terminal stays as it was.
    for before in previous:
        if before.status not in TERMINAL_STATUSES:
            continue
        now = by_id.get(before.id)
        if now is None or _final(now) != _final(before):
            was, became = _final(before), None if now is None else _final(now)
            bad("T2", f"terminal turn {before.number} ({before.id}) was {was}, is now {became}")
    # T4: one turn per key, one start per turn.
    for key, count in Counter(t.idempotency_key for t in turns).items():
        if count > 1:
            bad("T4", f"idempotency key {key!r} belongs to {count} turns")
    opened = defaultdict(set)
    for event in events:
        if event.type == "turn.queued":
            opened[str(event.data.get("idempotency_key"))].add(str(event.data.get("turn_id")))
    for key, turn_ids in opened.items():
        if len(turn_ids) > 1:
            bad("T4", f"idempotency key {key!r} opened turns {sorted(turn_ids)}")
    for turn_id, life in moves.items():
        starts = sum(e.type == "turn.running" for e in life)
        if starts > 1:
            bad("T4", f"turn {turn_id!r} started running {starts} times")
    _answers(by_id, events, bad)
    return found


class WholeAnswer(NamedTuple):
    """A completed turn's whole answer as the ledger tells it (:func:`whole_answer`)."""

    message: JSONObject  # the wire's ``AgentMessage`` of every block of the answer
    said: SessionEvent | None  # the answering response's assistant ``message`` event
    cuts: int  # how many cut responses it continues (``continue`` notices crossed)


def completed_answers(
    turns: Iterable[TurnRecord], events: Sequence[SessionEvent]
) -> Iterator[tuple[TurnRecord, SessionEvent, WholeAnswer | None]]:
    """Each native turn's ``turn.completed`` event with its whole answer (None: not told)."""
    by_id = {turn.id: turn for turn in turns}
    for index, event in enumerate(events):
        turn = by_id.get(str(event.data.get("turn_id")))
        if event.type == "turn.completed" and turn is not None and turn.driver == NATIVE_DRIVER:
            yield turn, event, whole_answer(events, index)


def _answers(by_id: dict[str, TurnRecord], events: Sequence[SessionEvent], bad: Any) -> None:
    """``T5``: each native ``turn.completed`` holds the whole answer (:func:`whole_answer`)."""
    for turn, event, answer in completed_answers(by_id.values(), events):
        if answer is None:
            continue  # a compaction or a fitted event under it: not judged
        expected, said = answer.message, answer.said
        where = f"turn {turn.number} ({turn.id}) completed at #{event.sequence}"
        result = event.data.get("result")
        if result != {"message": expected}:
            bad("T5", f"{where} with result {result}, but its whole answer is {expected}")
        told = None if said is None else said.data.get("message")
        if told != (expected if expected["parts"] else None):
            bad("T5", f"{where}: its answer's message event says {told}, not {expected}")


# Conversation events a walk back over the answer passes: ``assistant.block``s, a system
# ``message`` (``continue``, or a notice). Any other conversation event ends the answer; any
# other event is no conversation (``response.end``, ``turn.*``, ``message.accepted``…).
_ENDS_ANSWER = frozenset({"tool.result", "failure.note"})
_UNDER_REWRITE = frozenset({"compaction", "model.switch"})


def whole_answer(events: Sequence[SessionEvent], completed: int) -> WholeAnswer | None:
    """The whole answer of the response whose transaction appended ``events[completed]`` (a
    ``turn.completed``), as the wire's ``AgentMessage`` — and that response's assistant
    ``message`` event, if any. None when it cannot be told from the ledger (a compaction or
    a model switch rewrote the conversation under it; an event was fitted).

    Walking back from the completion: the response's blocks; a ``continue`` notice joins the
    cut response before it (its blocks too); notices pass only on the way to a ``continue``
    (the ones consumed at a continuation's boundary). Anything else — the turn's input, a
    tool result, a failure note, a finished response's message, notices after a finished
    response — ends it.
    """
    blocks: list[AssistantBlock] = []
    said: SessionEvent | None = None
    cuts = 0
    in_notices = False  # passed notices: only a ``continue`` before them joins more blocks
    for event in reversed(events[:completed]):
        kind, data = event.type, event.data
        if kind in _UNDER_REWRITE:
            return None
        if kind in _ENDS_ANSWER:
            break
        if kind == "assistant.block":
            if in_notices:
                break
            if "block" not in data:
                return None  # fitted: its payload was left out
            blocks.append(msgspec.convert(data["block"], AssistantBlock))
            continue
        if kind != "message":
            continue
        role, reason = data.get("role"), data.get("reason")
        if role == "assistant" and said is None and not blocks and not in_notices:
            said = event  # the answering response's own message
        elif role == "system" and reason == "continue":
            in_notices = False
            cuts += 1
        elif role == "system" and reason == "notice":
            in_notices = True
        else:
            break  # the turn's input, another response's message, a handoff…
    blocks.reverse()
    return WholeAnswer(message=assistant_json(blocks), said=said, cuts=cuts)


def _final(turn: TurnRecord) -> tuple[Any, ...]:
    """What a terminal turn keeps forever."""
    error = None if turn.error is None else msgspec.to_builtins(turn.error)
    return (turn.status, turn.result, error, turn.completed_at_ms)


def _life(turn: TurnRecord, life: list[SessionEvent], bad: Any) -> None:
    """``T1``: the turn's events are one path from ``queued``, ending where the row is."""
    statuses = [str(e.data.get("status", e.type.removeprefix(TURN_EVENT_PREFIX))) for e in life]
    where = f"turn {turn.number} ({turn.id}, status {turn.status}) has events {statuses}"
    if not statuses or statuses[0] != "queued":
        bad("T1", f"{where}: its life does not start with turn.queued")
        return
    for was, became in itertools.pairwise(statuses):
        if became not in TRANSITIONS.get(was, ()):  # type: ignore[call-overload]
            bad("T1", f"{where}: {was} -> {became} is no allowed move")
    terminal = [s for s in statuses if s in TERMINAL_STATUSES]
    if len(terminal) > 1:
        bad("T1", f"{where}: {len(terminal)} terminal states")
    if statuses[-1] != turn.status:
        bad("T1", f"{where}: the row says {turn.status}, its last event {statuses[-1]}")


def _inputs(
    turn: TurnRecord, life: list[SessionEvent], events: Sequence[SessionEvent], bad: Any
) -> None:
    """``T3``: the turn's ``turn.queued`` and its input's ``message.accepted``."""
    queued = [e for e in life if e.type == "turn.queued"]
    if queued and (
        queued[0].data.get("number") != turn.number
        or queued[0].data.get("idempotency_key") != turn.idempotency_key
    ):
        bad("T3", f"turn {turn.number} ({turn.id}): its turn.queued names {queued[0].data}")
    if not queued:
        bad("T3", f"turn {turn.number} ({turn.id}) has no turn.queued event")
    if turn.message_id is None:
        return
    accepted = [
        e
        for e in events
        if e.type == "message.accepted"
        and e.data.get("message_id") == turn.message_id
        and e.data.get("turn_id") == turn.id
        and e.turn_id == turn.id
    ]
    if not accepted:
        bad(
            "T3",
            f"turn {turn.number} ({turn.id}): no message.accepted of its input "
            f"{turn.message_id!r} names it",
        )


def judge_keyed_sends(sends: Iterable[dict[str, Any]], *, process: int) -> list[Violation]:
    """``T4`` from the sender's side: every send with one key got the same turn back, and at
    most one of them was new (``created``). ``sends``: ``key``, ``turn_id``, ``created``."""
    turns: dict[str, set[str]] = defaultdict(set)
    created: Counter[str] = Counter()
    for send in sends:
        key = str(send["key"])
        if send.get("turn_id") is not None:
            turns[key].add(str(send["turn_id"]))
        created[key] += bool(send["created"])
    found = [
        Violation(
            invariant="T4",
            process=process,
            detail=f"sends with idempotency key {key!r} got turns {sorted(ids)}",
        )
        for key, ids in sorted(turns.items())
        if len(ids) > 1
    ]
    found += [
        Violation(
            invariant="T4",
            process=process,
            detail=f"{count} sends with idempotency key {key!r} were accepted as new",
        )
        for key, count in sorted(created.items())
        if count > 1
    ]
    return found


__all__ = [
    "TURN_INVARIANTS",
    "WholeAnswer",
    "check_turns",
    "completed_answers",
    "judge_keyed_sends",
    "whole_answer",
]
