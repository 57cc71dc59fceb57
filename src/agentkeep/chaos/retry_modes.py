"""Chaos for ``retry_forever`` (docs/decisions.md) and permission modes.

Two suites share one world and one journal:

- ``retry_forever``: the agent is opened with ``retry_forever=True`` (a backoff of a few
  milliseconds) under a flaky provider (``failure_rate``: a response fails at a seeded event,
  often after some of its tool calls streamed; every response starts with a reasoning block,
  so a failure may cut one short after it, which ``C2`` judges) and a store that fails
  single operations (``flaky``) or dies (``crash``); messages carry permission-mode changes.
- ``permission_modes``: the same messages without retrying and without provider failures,
  under crashes only: the mode's durability across reopen is what is judged.

The :class:`ModeJournal` is a feature and a tool wrapper: it records the mode every tool
execution and every ``before_tool_call`` sees, and before an execution runs it reads the
store (through the live process) to see whether that call's result is already durable — a
committed effect replayed. What is judged, beyond the shared :class:`~agentkeep.chaos.Checker`:

- ``R1``: under ``retry_forever`` no failure note is ever written and no turn ever fails,
  at the end of each process and at each ``done(error)`` — but for one written by an aborting
  process itself (an abort stops the retrying; a write of its wind-down the store refuses
  gives up). Each process is judged by the notes and failed turns it added.
- ``R2``: under ``retry_forever`` no tool execution starts for a call whose result is
  durable (a committed effect is never replayed).
- ``R3``: under ``retry_forever`` a process whose store survives ends settled: idle,
  nothing owed, queued or pending (only abort, close or shutdown stop a run).
- ``P1``: a tool execution, its ``before_tool_call`` context and its call info carry the mode
  of the last consumed message that set one before the call's response began (in the
  durable history: the last such user record before the call's block).
- ``P2``: the durable mode (settings) is that of the last consumed message that set one,
  after every process, crashed or not.

Mutants (:mod:`agentkeep.chaos._mutants.retry_modes`): ``retry_gives_up_after_two_failures``
(``R1``/``R3``), ``retry_replays_the_last_batch`` (``R2``) and ``mode_changes_at_acceptance``
(``P1``/``P2``).
"""

from __future__ import annotations

import dataclasses
import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentkeep.chaos.batches import BatchingModel
from agentkeep.chaos.campaign_result import CampaignResult
from agentkeep.chaos.frame import Campaign, chunky_providers, play, queue_modes
from agentkeep.chaos.invariants import INVARIANTS, Violation
from agentkeep.chaos.process import DurableState, Offer, ProcessReport, history_log
from agentkeep.chaos.tools import ledger_tools
from agentkeep.features import Feature, HookContext
from agentkeep.loop.texts import ABORTED_CALL
from agentkeep.persistence.faults import FaultPlan
from agentkeep.persistence.interface import Transaction
from agentkeep.providers.catalog import Providers
from agentkeep.tools import Tool, ToolCallDecision, ToolCallInfo, ToolContext
from agentkeep.types import (
    Done,
    PermissionMode,
    StreamEvent,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
)
from agentkeep.types.records import BlockRecord, QueueName, SystemRecord, ToolRecord, UserRecord

if TYPE_CHECKING:
    from agentkeep.chaos.world import ChaosWorld

# Registered here (not in invariants.py) so these checks stay one module of their own.
INVARIANTS.update(
    {
        "R1": "under retry_forever a failure is retried: no failure note, no failed turn",
        "R2": "under retry_forever a committed tool effect is never replayed",
        "R3": "under retry_forever only abort, close or shutdown stop a run",
        "P1": "a call and its hooks run under the mode its response started under",
        "P2": "the durable permission mode is the last consumed message's",
    }
)

DEFAULT_MODE: PermissionMode = "auto"
MODES: tuple[PermissionMode | None, ...] = (
    None,
    "read_only",
    "workspace_write",
    "auto",
    "full_access",
)
# A backoff short enough for many retries per seed, long enough to be a real timer.
RETRY_OPTIONS: dict[str, object] = {
    "retry_forever": True,
    "retry_initial_seconds": 0.001,
    "retry_max_seconds": 0.008,
}
FAILURE_RATE = 0.35


class ModeJournal(Feature):
    """Records the permission mode each tool execution and ``before_tool_call`` sees, and
    (``retrying``) any execution of a call whose result was already durable, and any
    ``done(error)`` seen while a durable turn had failed."""

    name = "chaosmodes"

    def __init__(self, *, retrying: bool) -> None:
        self.retrying = retrying
        self.world: ChaosWorld | None = None
        self._lock = threading.Lock()
        # (generation, provider call id, mode)
        self.tool_modes: list[tuple[int, str, str]] = []
        # (generation, provider call id, the hook context's mode, the call info's mode)
        self.hook_modes: list[tuple[int, str, str, str]] = []
        self.replays: list[tuple[int, str]] = []
        # (generation, how many turns had failed, the statuses) at each done(error)
        self.errors_after_failure: list[tuple[int, int, str]] = []

    def attach(self, world: ChaosWorld) -> None:
        """Read the world's live process from now on (call before its first process)."""
        self.world = world

    def wrap(self, original: Tool[Any, Any]) -> Tool[Any, Any]:
        """``original``, recording its execution's mode and checking for a replay first."""
        execute = original.execute

        def journaled(ctx: ToolContext, args: Any) -> Any:
            self._executing(ctx)
            return execute(ctx, args)

        return dataclasses.replace(original, execute=journaled)

    def before_tool_call(self, ctx: HookContext, call: ToolCallInfo) -> ToolCallDecision | None:
        generation = self.world.generation if self.world is not None else 0
        with self._lock:
            self.hook_modes.append(
                (generation, call.call.call_id, ctx.permission_mode, call.permission_mode)
            )
        return None

    def on_event(self, ctx: HookContext, event: StreamEvent) -> None:
        if not (self.retrying and isinstance(event, Done) and event.state == "error"):
            return
        turns = self._read(lambda tx: tx.turns.page(ctx.agent_id, 0, 1000))
        if turns is None:
            return
        statuses = [t.status for t in turns]
        # Not "some turn is running": a run resumed after an abort and a reopen answers the
        # aborted turn's message under no running turn (docs/chaos.md).
        failed = statuses.count("failed")
        if failed:
            with self._lock:
                entry = (self._generation(), failed, ",".join(statuses))
                self.errors_after_failure.append(entry)

    def _executing(self, ctx: ToolContext) -> None:
        generation = self._generation()
        with self._lock:
            self.tool_modes.append((generation, ctx.provider_call_id, ctx.permission_mode))
        if not self.retrying:
            return
        call_id = ctx.provider_call_id
        records = self._read(lambda tx: tx.records.load(ctx.agent_id))
        if records is None:
            return
        answers = [
            r.message for r in records if isinstance(r, ToolRecord) and r.message.call_id == call_id
        ]
        if answers and not _answered_by_its_own_abort(answers, ctx):
            with self._lock:
                self.replays.append((generation, call_id))

    def _generation(self) -> int:
        return self.world.generation if self.world is not None else 0

    def _read(self, work: Callable[[Transaction], Any]) -> Any:
        """``work`` through the live process's store; None if none runs or it died."""
        world = self.world
        live = world._live if world is not None else None
        system = live.system if live is not None else None
        if live is None or system is None or live.crashed():
            return None
        try:
            return system.internals.store.read(work)
        except Exception:  # a dying store: the disk is judged after the process
            return None


def _answered_by_its_own_abort(answers: list[ToolResultMessage], ctx: ToolContext) -> bool:
    """True if the only durable answers of the call are the abort's and this execution was
    cancelled (read after the records: an abort cancels the call before its answer
    commits): an execution racing its own abort, not a replay.

    An abort answers a running call at once and never waits for its tool (``I24``): a tool
    thread dispatched before the abort, that passed the runner's last cancellation check
    just before it, starts its body after that answer committed (seed 58 on PostgreSQL
    under load). No result of an execution is durable then, so nothing is replayed. A call
    answered by an abort and run again by a later dispatch has a live token: still ``R2``.
    """
    aborted = all(
        a.is_error and [b.text for b in a.content if isinstance(b, TextBlock)] == [ABORTED_CALL]
        for a in answers
    )
    return aborted and ctx.cancel.cancelled


# -- the checks ------------------------------------------------------------------------------


def expected_modes(world: ChaosWorld, state: DurableState) -> tuple[str, dict[str, str]]:
    """The mode the durable history says is in force now, and per provider call id the mode
    in force when the response carrying that call began (the last consumed user record that
    set a mode before the call's block)."""
    modes = {o.id: o.permission_mode for o in world.offers}
    mode: str = DEFAULT_MODE
    calls: dict[str, str] = {}
    for record in history_log(state):
        if isinstance(record, UserRecord):
            chosen = modes.get(record.message_id)
            if chosen is not None:
                mode = chosen
        elif isinstance(record, BlockRecord) and isinstance(record.block, ToolCallBlock):
            calls.setdefault(record.block.call_id, mode)
    return mode, calls


class ModeChecks:
    """``R1``–``R3`` and ``P1``–``P2`` after each process (see the module docstring)."""

    def __init__(self, world: ChaosWorld, journal: ModeJournal) -> None:
        self.world = world
        self.journal = journal
        self._seen_tools = 0
        self._seen_hooks = 0
        self._seen_replays = 0
        self._seen_errors = 0
        # An abort stops the retrying: a write of its own wind-down that the store refuses
        # takes the give-up path, so an aborting process may leave one note (and fail its
        # turn) — that process, not a later one. Aborting processes so far (a done(error)
        # may follow as many failed turns):
        self._aborts = 0
        # Failure notes and failed turns at the end of the last process judged, so each
        # process is judged by what it added.
        self._notes = 0
        self._failed_turns = 0

    def after_process(self, state: DurableState, report: ProcessReport) -> list[Violation]:
        """Judge the process that just closed, from the disk and the journal."""
        process = report.generation
        found: list[Violation] = []

        def bad(check: str, detail: str) -> None:
            found.append(Violation(invariant=check, process=process, detail=detail))

        now, calls = expected_modes(self.world, state)
        durable = state.settings.permission_mode if state.settings is not None else DEFAULT_MODE
        if durable != now:
            bad("P2", f"durable mode {durable!r}, the last consumed message set {now!r}")
        journal = self.journal
        for generation, call_id, mode in journal.tool_modes[self._seen_tools :]:
            expected = calls.get(call_id)
            if expected is not None and mode != expected:
                bad(
                    "P1",
                    f"{call_id} ran under {mode!r} in process {generation}; its response "
                    f"began under {expected!r}",
                )
        for generation, call_id, ctx_mode, info_mode in journal.hook_modes[self._seen_hooks :]:
            expected = calls.get(call_id)
            if expected is not None and (ctx_mode != expected or info_mode != expected):
                bad(
                    "P1",
                    f"before_tool_call of {call_id} in process {generation} saw context "
                    f"{ctx_mode!r} and call {info_mode!r}; its response began under {expected!r}",
                )
        self._seen_tools = len(journal.tool_modes)
        self._seen_hooks = len(journal.hook_modes)
        if journal.retrying:
            found += self._retrying(state, report, bad)
        return found

    def _retrying(
        self, state: DurableState, report: ProcessReport, bad: Callable[[str, str], None]
    ) -> list[Violation]:
        journal = self.journal
        for generation, call_id in journal.replays[self._seen_replays :]:
            bad("R2", f"{call_id} ran again in process {generation} after its result was durable")
        self._aborts += report.aborted
        for generation, count, statuses in journal.errors_after_failure[self._seen_errors :]:
            if count > self._aborts:
                bad("R1", f"done(error) in process {generation} after a turn failed ({statuses})")
        self._seen_replays = len(journal.replays)
        self._seen_errors = len(journal.errors_after_failure)
        allowed = 1 if report.aborted else 0
        notes = [
            r for r in history_log(state) if isinstance(r, SystemRecord) and r.reason == "failure"
        ]
        if len(notes) - self._notes > allowed:
            written = len(notes) - self._notes
            bad("R1", f"{written} failure note(s) written while retrying forever")
        numbers = [t.number for t in state.turns if t.status == "failed"]
        if len(numbers) - self._failed_turns > allowed:
            bad("R1", f"turns {numbers[self._failed_turns :]} failed while retrying forever")
        self._notes, self._failed_turns = len(notes), len(numbers)
        if report.crashed:
            return []
        if report.aborted:
            # An abort stops the run (its work may stay owed), so the process became idle.
            if not report.idle:
                bad("R3", "an abort did not stop the retrying: the process never became idle")
            return []
        left = {
            "never became idle": [] if report.idle else ["idle"],
            "owes work": [] if state.owed is None else ["owed"],
            "has queued messages": [q.id for q in state.queued],
            "has pending calls": [p.call.call_id for p in state.pending],
        }
        for what, items in left.items():
            if items:
                plan = "healthy" if report.faults is None else report.faults.mode
                bad("R3", f"a process whose store survived ({plan}) {what}: {items}")
        return []


# -- the suites --------------------------------------------------------------------------------


def _flaky_providers(seed: int) -> Providers:
    providers = Providers()
    model = BatchingModel(
        seed=seed, failure_rate=FAILURE_RATE, stream_chunks=(1, 4), reasoning=True
    )
    providers.add("local", model, kind="gym")
    return providers


def _offers(rng: random.Random, prefix: str, count: int) -> list[Offer]:
    offers = []
    for i in range(count):
        queue: QueueName = "send" if rng.random() < 0.5 else "steering"
        mode = rng.choice(MODES)
        offers.append(
            Offer(id=f"{prefix}{i}", text=f"{prefix} {i}", queue=queue, permission_mode=mode)
        )
    return offers


def _campaign(suite: str, seed: int, *, retrying: bool, home: str | Path | None) -> CampaignResult:
    journal = ModeJournal(retrying=retrying)
    options: dict[str, object] = {
        "tools": tuple(journal.wrap(t) for t in ledger_tools()),
        "features": (journal,),
        **queue_modes(seed),
    }
    if retrying:
        options["providers"] = _flaky_providers
        options["system_options"] = RETRY_OPTIONS
    else:
        options["providers"] = chunky_providers

    def body(c: Campaign) -> None:
        journal.attach(c.world)
        checks = ModeChecks(c.world, journal)
        original = c.process

        def process(*, final: bool = False, **more: object) -> ProcessReport:
            report = original(final=final, **more)
            state = c.world.durable()
            c.checker.violations += checks.after_process(state, report)
            return report

        offers = _offers(c.rng, "p", 6)
        for _ in range(c.rng.randint(2, 4)):
            take = c.rng.randint(0, 3)
            fresh, offers = offers[:take], offers[take:]
            crash = not retrying or c.rng.random() < 0.35
            plan = c.crash() if crash else FaultPlan(at=c.fault_point(), mode="flaky")
            # Retrying, an abort (often during a backoff) is one of the few things that
            # stop a run: the process must still become idle.
            abort = retrying and not crash and c.rng.random() < 0.3
            process(
                messages=fresh,
                faults=plan,
                abort_after_events=c.rng.randint(1, 8) if abort else None,
            )
        c.world.offer(*offers)
        # An aborted turn may settle leaving its message unanswered; a last
        # message makes the agent answer the whole conversation.
        process(final=True, start=True, messages=[Offer(id="last", text="last")])

    return play(suite, seed, body, world_options=options, home=home)


def retry_forever(seed: int, *, home: str | Path | None = None) -> CampaignResult:
    """``retry_forever=True`` under a flaky provider and a flaky or dying store, 6 messages
    (send or steer, each perhaps changing the permission mode) over 2–4 processes (some
    aborting after 1–8 stream events), then a healthy one with a last message: the shared
    checks, ``R1``–``R3`` and ``P1``–``P2``, ``answer-7``. Every response starts with a
    reasoning block, so a failure right after it cuts the response short: it must be
    continued, never settled over (``C2``)."""
    return _campaign("retry_forever", seed, retrying=True, home=home)


def permission_modes(seed: int, *, home: str | Path | None = None) -> CampaignResult:
    """6 messages changing the permission mode (send or steer) over 2–4 crashing processes,
    then a healthy one with a last message: the shared checks, ``P1``–``P2``, ``answer-7``."""
    return _campaign("permission_modes", seed, retrying=False, home=home)


__all__ = [
    "FAILURE_RATE",
    "ModeChecks",
    "ModeJournal",
    "expected_modes",
    "permission_modes",
    "retry_forever",
]
