"""The judging half of the ``lifecycle_races`` campaign: what each raced operation may do.

:class:`Facts` condenses a finished :class:`~agentkeep.chaos.lifecycle_race.Race`: which
create won each newcomer id, which deletes and re-creates succeeded, and when the first closer
began, all as logical tickets. Every check returns :class:`~agentkeep.chaos.Violation` values
named by the invariant they guard (docs/invariants.md):

* invariant I1 — an accepted message is in its agent's conversation exactly once; a repeat of a
  durable id is an idempotent repeat; a refused message is not in the conversation; an agent
  id is claimed by one create;
* invariant I25 — close and delete admit nothing new (a racing caller is refused with
  ``AgentClosedError`` or, for an agent that does not exist, ``UnknownAgentError``; nothing
  else), and answer everything admitted before they return; a deleted id is released (resolve
  refuses it, re-creating it starts clean);
* invariant I26 — no operation hangs;
* invariant I28 — the store's lock is free once ``close``/``shutdown`` returned.

The invariants of the shared checker (well-formed history, owed work, continuity across
processes, the final answer) are judged by :class:`~agentkeep.chaos.checker.Checker`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from agentkeep.chaos.invariants import Violation, describe_records
from agentkeep.chaos.lifecycle_race import Op, Plan, Race
from agentkeep.chaos.process import DurableState
from agentkeep.chaos.tools import LedgerEntry
from agentkeep.delivery import Delivery
from agentkeep.errors import (
    AgentClosedError,
    AgentExistsError,
    UnknownAgentError,
)
from agentkeep.types import TextBlock
from agentkeep.types.records import BlockRecord, UserRecord

Problem = tuple[int, str] | None


def violation(
    invariant: int | str, process: int, detail: str, agent: str | None = None
) -> Violation:
    """A violation; one about an agent starts ``agent 'ID': ``."""
    about = "" if agent is None else f"agent {agent!r}: "
    return Violation(invariant=invariant, process=process, detail=about + detail)


@dataclass(frozen=True)
class Facts:
    """What the race decided (see the module docstring)."""

    plan: Plan
    ops: tuple[Op, ...]
    closing: int | None  # the first closer's start ticket
    winners: dict[str, list[Op]]  # newcomer id -> its successful creates
    deleted: dict[str, Op]  # doomed id -> its successful delete
    reborn: dict[str, Op]  # doomed id -> its successful re-create

    @classmethod
    def of(cls, race: Race) -> Facts:
        """The facts of a finished race: its calls, the first close, and each newcomer's successful
        creates.
        """
        ops = tuple(race.ops)
        closers = [op.start for op in ops if op.kind == "close"]
        winners: dict[str, list[Op]] = {n: [] for n in race.plan.newcomers}
        for op in ops:
            if op.kind == "create" and op.ok and op.agent is not None:
                winners[op.agent].append(op)
        return cls(
            plan=race.plan,
            ops=ops,
            closing=min(closers) if closers else None,
            winners=winners,
            deleted=_successful(ops, "delete"),
            reborn=_successful(ops, "recreate"),
        )

    # -- what was true while an operation ran ----------------------------------------------

    def closing_during(self, op: Op) -> bool:
        """A closer had begun before ``op`` returned."""
        return self.closing is not None and op.end is not None and self.closing < op.end

    def deleting_during(self, op: Op) -> bool:
        """``op`` overlapped a successful delete of its agent."""
        delete = self.deleted.get(op.agent or "")
        return delete is not None and not (op.returned_before(delete) or delete.returned_before(op))

    def missing_during(self, op: Op) -> bool:
        """At some moment while ``op`` ran its agent did not exist: not created yet, or
        deleted and not re-created yet."""
        agent = op.agent or ""
        if agent in self.plan.newcomers:
            won = self.winners[agent]
            return not won or not won[0].returned_before(op)
        delete = self.deleted.get(agent)
        if delete is None or op.returned_before(delete):
            return False
        reborn = self.reborn.get(agent)
        return reborn is None or not reborn.returned_before(op)

    def absent_throughout(self, op: Op) -> bool:
        """The agent did not exist at any moment ``op`` ran."""
        agent = op.agent or ""
        if agent in self.plan.newcomers:
            won = self.winners[agent]
            return not won or (op.end is not None and op.end < won[0].start)
        delete = self.deleted.get(agent)
        if delete is None or delete.end is None or delete.end >= op.start:
            return False
        reborn = self.reborn.get(agent)
        return reborn is None or (op.end is not None and op.end < reborn.start)

    # -- after the race --------------------------------------------------------------------

    def live(self) -> list[str]:
        """The ids that name an agent once the race is over."""
        residents = [r for r in self.plan.residents if r not in self.deleted or r in self.reborn]
        return residents + [n for n in self.plan.newcomers if self.winners[n]]

    def gone(self) -> list[str]:
        """The ids deleted (and not re-created) by the race."""
        return [d for d in self.deleted if d not in self.reborn]

    def sends(self, agent: str) -> list[Op]:
        """The race's ``send`` calls to ``agent``, in the order they were made."""
        return [op for op in self.ops if op.kind == "send" and op.agent == agent]

    def accepted(self, agent: str) -> set[str]:
        """Message ids surely accepted by the agent's current life."""
        reborn = self.reborn.get(agent)
        return {
            op.message or ""
            for op in self.sends(agent)
            if op.ok and (reborn is None or (reborn.end is not None and op.start > reborn.end))
        }

    def refused(self, agent: str) -> set[str]:
        """Message ids every attempt of which was refused."""
        tried = {op.message or "" for op in self.sends(agent)}
        return tried - {op.message or "" for op in self.sends(agent) if op.ok}


def _successful(ops: Iterable[Op], kind: str) -> dict[str, Op]:
    return {op.agent: op for op in ops if op.kind == kind and op.ok and op.agent is not None}


# -- each operation ------------------------------------------------------------------------


def judge_ops(facts: Facts) -> list[Violation]:
    """Every raced call returned, or was refused with an error its race explains (invariant I25);
    an id was claimed by one create and a repeat was idempotent (I1); nothing hung (I26)."""
    found: list[Violation] = []
    for op in facts.ops:
        if op.end is None:
            found.append(violation(20, 1, f"{op.describe()}: never returned", op.agent))
            continue
        problem = _JUDGES[op.kind](facts, op)
        if problem is not None:
            found.append(violation(problem[0], 1, f"{op.describe()}: {problem[1]}", op.agent))
    for agent, won in facts.winners.items():
        if len(won) > 1:
            found.append(violation(1, 1, f"created {len(won)} times: {won}", agent))
    return found + _judge_repeats(facts)


def _refusal(facts: Facts, op: Op) -> Problem:
    """A refusal is legitimate when closing, deleting or a missing agent explains it."""
    if op.failed(AgentClosedError) and (facts.closing_during(op) or facts.deleting_during(op)):
        return None
    if op.failed(UnknownAgentError) and facts.missing_during(op):
        return None
    return 18, "refused with an error its race does not explain"


def _judge_send(facts: Facts, op: Op) -> Problem:
    if not op.ok:
        return _refusal(facts, op)
    if facts.absent_throughout(op):
        return 18, "accepted for an agent that did not exist while the send ran"
    return None


def _judge_lookup(facts: Facts, op: Op) -> Problem:
    if not op.ok:
        return _refusal(facts, op)
    if facts.absent_throughout(op):
        return 18, "answered for an agent that did not exist while it ran"
    if op.kind == "metadata" and not (
        isinstance(op.result, dict) and op.result.get("k") == op.note
    ):
        return 18, f"metadata update returned {op.result!r}"
    return None


def _judge_create(facts: Facts, op: Op) -> Problem:
    if op.ok or (op.failed(AgentClosedError) and facts.closing_during(op)):
        return None
    if op.failed(AgentExistsError) and facts.winners[op.agent or ""]:
        return None
    return 18, "a racing create must win or get AgentExistsError"


def _judge_squat(facts: Facts, op: Op) -> Problem:
    if op.ok:
        return 1, "took the id of a live agent"
    if op.failed(AgentExistsError) or (op.failed(AgentClosedError) and facts.closing_during(op)):
        return None
    return 18, "creating a live agent's id must raise AgentExistsError"


def _judge_delete(facts: Facts, op: Op) -> Problem:
    if op.ok or (op.failed(AgentClosedError) and facts.closing_during(op)):
        return None
    return 18, "delete of a live agent must succeed unless the system is closing"


def _judge_recreate(facts: Facts, op: Op) -> Problem:
    if op.ok or (op.failed(AgentClosedError) and facts.closing_during(op)):
        return None
    return 18, "the deleted id was not released"


def _judge_close(facts: Facts, op: Op) -> Problem:
    return None if op.ok else (18, "close/shutdown raised")


_JUDGES: dict[str, Callable[[Facts, Op], Problem]] = {
    "send": _judge_send,
    "create": _judge_create,
    "squat": _judge_squat,
    "delete": _judge_delete,
    "recreate": _judge_recreate,
    "resolve": _judge_lookup,
    "metadata": _judge_lookup,
    "close": _judge_close,
}


def _judge_repeats(facts: Facts) -> list[Violation]:
    """A fresh id is created once; its repeat is an idempotent repeat (invariant I1) — unless the
    agent was re-created between them (a new life has no ids yet)."""
    found: list[Violation] = []
    seen: set[tuple[str, str]] = set()
    for op in facts.ops:
        if op.kind != "send" or not op.ok or not isinstance(op.result, Delivery):
            continue
        key = (op.agent or "", op.message or "")
        repeat = key in seen
        seen.add(key)
        if key[0] not in facts.reborn and op.result.created is repeat:
            said = "accepted again" if repeat else "reported as a repeat on its first send"
            found.append(violation(1, 1, f"{op.describe()}: message {said}", key[0]))
    return found


# -- the race's side facts -----------------------------------------------------------------


def judge_hangs(race: Race, stuck: list[str]) -> list[Violation]:
    """A thread still running at the deadline hung (invariant I26); each running call is named."""
    running = [op.describe() for op in race.ops if op.end is None]
    return [violation(20, 1, f"thread {name} hung; running: {running}") for name in stuck]


def judge_probes(race: Race) -> list[Violation]:
    """Once close/shutdown returned, the store opens (invariant I28) — also for a closer that found
    another close already running (concurrent closers share one close)."""
    found: list[Violation] = []
    for op, error in race.probes:
        if error is None:
            continue
        others = [o for o in race.ops if o.kind == "close" and o is not op]
        sharing = any(o.end is None or op.end is None or o.end > op.end for o in others)
        why = " (returned while another closer was still closing)" if sharing else ""
        detail = f"{op.describe()}: returned but the store did not open{why}: {error!r}"
        found.append(violation(23, 1, detail))
    return found


def judge_deletes(facts: Facts, race: Race) -> list[Violation]:
    """Delete returns once the agent answered everything accepted before it began, and
    leaves it no actor (invariant I25)."""
    found: list[Violation] = []
    for agent, delete in facts.deleted.items():
        if race.left_alive.get(agent):
            found.append(
                violation(18, 1, "delete returned while the agent still had an actor", agent)
            )
        state = race.after_delete.get(agent)
        before = {o.message or "" for o in facts.sends(agent) if o.ok and o.returned_before(delete)}
        for message in sorted(before - answered(state)) if state is not None else []:
            found.append(violation(18, 1, f"delete returned with {message!r} unanswered", agent))
    return found


def judge_reborn(facts: Facts, agent: str, state: DurableState) -> list[Violation]:
    """A re-created id starts clean (invariant I25): it holds only messages sent to its new life,
    and its conversation begins with one of them."""
    reborn = facts.reborn.get(agent)
    if reborn is None:
        return []
    since = {o.message for o in facts.sends(agent) if o.end is not None and o.end > reborn.start}
    found = [
        violation(18, 1, f"re-created, it holds {message!r} of its previous life", agent)
        for message in sorted(present(state) - since)
    ]
    records = state.records
    first = next((i for i, r in enumerate(records) if isinstance(r, UserRecord)), len(records))
    if first:
        stray = describe_records(records[:first])
        detail = f"re-created, it starts with {stray} of its previous life"
        found.append(violation(18, 1, detail, agent))
    return found


def answered(state: DurableState) -> set[str]:
    """User message ids followed by a text answer in the conversation."""
    done: set[str] = set()
    waiting: list[str] = []
    for record in state.records:
        if isinstance(record, UserRecord):
            waiting.append(record.message_id)
        elif isinstance(record, BlockRecord) and isinstance(record.block, TextBlock):
            done.update(waiting)
            waiting.clear()
    return done


def unanswered(state: DurableState) -> list[str]:
    """What a settled agent must not hold: owed work, queued or pending entries, or a user
    message no text answer follows."""
    problems: list[str] = []
    if state.owed is not None:
        problems.append(f"owed work ({state.owed.stage})")
    if state.queued:
        problems.append(f"queued {[q.id for q in state.queued]}")
    if state.pending:
        problems.append(f"pending calls {[p.call.call_id for p in state.pending]}")
    users = {r.message_id for r in state.records if isinstance(r, UserRecord)}
    if users - answered(state):
        problems.append(f"unanswered {sorted(users - answered(state))}")
    return problems


def present(state: DurableState) -> set[str]:
    """Message ids in the conversation or still queued."""
    users = {r.message_id for r in state.records if isinstance(r, UserRecord)}
    return users | {q.id for q in state.queued}


def judge_fragile(entries: Iterable[LedgerEntry], fragile: frozenset[str]) -> list[Violation]:
    """A non-durable tool ran at most once per call, across both processes (invariant I17)."""
    counts = Counter((e.agent_id, e.internal_id) for e in entries if e.tool in fragile)
    return [
        violation(12, 2, f"non-durable tool ran {n} times for call {call}", agent)
        for (agent, call), n in sorted(counts.items())
        if n > 1
    ]


__all__ = [
    "Facts",
    "answered",
    "judge_deletes",
    "judge_fragile",
    "judge_hangs",
    "judge_ops",
    "judge_probes",
    "judge_reborn",
    "present",
    "unanswered",
    "violation",
]
