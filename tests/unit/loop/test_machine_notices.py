"""Notices and ``prepare_inference`` in the loop core's property machine
(``test_machine_properties``): the core is built as for features that supply inference
boundary notices and prepare each request (docs/notices.md). Besides every promise the
machine checks, under random interleavings, failing commits and crashes:

- every request's view ends with its own inference boundary's notice (named after the very
  inference id the request is made under): nothing comes between the stage and its request;
- a request's boundary notices are in the history once, however often the process crashed
  between opening the stage and making the request (the owed fact marks the stage opened);
- ``prepare_inference`` asking to compact (at random) never stalls the turn or leaves work
  owed, and a compaction that fails is not attempted again on the same measurement.

Each mutant below breaks one of these promises, and the machine catches it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import msgspec
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule, run_state_machine_as_test

import agentkeep as ak
from agentkeep.errors import CommitOutcomeUnknownError
from agentkeep.loop import loading
from agentkeep.loop.effects import Commit, Effect, RunHook, StartInference
from agentkeep.loop.events import CommitFailed, CommitLanded, Event, HookFinished
from agentkeep.loop.machine import AgentLoop
from agentkeep.loop.plans import Appended, ConsumeNotices, Snapshot
from agentkeep.persistence.interface import Transaction
from agentkeep.runtime import commit_plans, loop_facts, plan_ports
from agentkeep.types import Settings, SystemMessage, TextBlock
from agentkeep.types.records import OwedWork, QueuedMessage, SystemRecord

from .test_machine_properties import AGENT, Disk, LoopMachine, Process, replaying


def _text(message: object) -> str:
    blocks = getattr(message, "content", ())
    return "".join(b.text for b in blocks if isinstance(b, TextBlock))


class NoticePolicy(plan_ports.KeepEverything):
    """A feature's ``system_notifications_transact``: one notice at each boundary, naming
    it (the inference boundary by the request's id)."""

    def message_notices(
        self, tx: Transaction, entry: QueuedMessage, settings: Settings
    ) -> Sequence[SystemMessage]:
        return [ak.system(f"message {entry.id}")]

    def inference_notices(
        self, tx: Transaction, owed: OwedWork, settings: Settings
    ) -> Sequence[SystemMessage]:
        return [ak.system(f"inference {owed.inference_id}")]


class NoticeProcess(Process):
    """A process whose core asks ``prepare_inference`` before each request (answered from
    ``compacting``, the feature's wishes, which outlive a crash) and opens every request's
    stage with its boundary notices (``NoticePolicy``)."""

    def __init__(
        self,
        disk: Disk,
        ids: Callable[[], str],
        ledger: list[tuple[str, str]],
        compacting: list[bool],
    ) -> None:
        super().__init__(disk, ids, ledger)
        self.core = AgentLoop(
            AGENT,
            new_id=ids,
            defaults=Settings(provider="local", model="gym-1"),
            eager_settle=True,
            consume_at_acceptance=True,
            notify_inference=True,
            prepare_inference=True,
        )
        self.compacting = compacting

    def carry_out(self, effect: Effect) -> list[Event]:
        match effect:
            case RunHook(hook="prepare_inference", drop_actions=dropped):
                compact = self.compacting.pop(0) if self.compacting else False
                return [HookFinished(hook="prepare_inference", compact=compact and not dropped)]
            case Commit(plan=plan):
                try:
                    value = self.disk.transact(
                        lambda tx: commit_plans.execute(tx, AGENT, plan, NoticePolicy())
                    )
                except CommitOutcomeUnknownError as error:
                    return [CommitFailed(plan=plan, message=str(error), outcome_unknown=True)]
                except Exception as error:
                    return [CommitFailed(plan=plan, message=str(error))]
                return [CommitLanded(plan=plan, value=value)]
            case StartInference(inference_id=inference_id, messages=messages):
                last = _text(messages[-1]) if messages else ""
                if last != f"inference {inference_id}":
                    self.ledger.append(("unnotified", f"{inference_id}: {last!r}"))
        return super().carry_out(effect)


class NoticeMachine(LoopMachine):
    def __init__(self) -> None:
        super().__init__()
        self.compacting: list[bool] = []
        self.process: NoticeProcess = self.new_process()

    def new_process(self) -> NoticeProcess:
        return NoticeProcess(self.disk, self.ids, self.ledger, self.compacting)

    @rule(times=st.integers(min_value=1, max_value=3))
    def prepare_asks_to_compact(self, times: int) -> None:
        """The feature's next preparations ask for a compaction."""
        self.compacting.extend([True] * times)

    @invariant()
    def every_request_ends_with_its_own_boundary_notice(self) -> None:
        unnotified = [what for kind, what in self.ledger if kind == "unnotified"]
        assert not unnotified, f"a request did not end with its boundary notice: {unnotified}"

    @invariant()
    def each_boundary_notice_is_in_the_history_once(self) -> None:
        live = self.disk.read(lambda tx: tx.records.load(AGENT))
        notices = [
            _text(r.message)
            for r in self.history_log(live)
            if isinstance(r, SystemRecord) and _text(r.message).startswith("inference ")
        ]
        twice = sorted({n for n in notices if notices.count(n) > 1})
        assert not twice, f"boundary notices appended twice: {twice}"


NoticeMachine.TestCase.settings = LoopMachine.TestCase.settings
test_notices_under_random_interleavings = NoticeMachine.TestCase


# -- mutants: each breaks one promise the machine must catch --------------------------------


@contextmanager
def stage_reopened_after_a_restart() -> Iterator[None]:
    """A restart forgets that the request's stage opened (the load drops the mark): its
    boundary notices are asked for, and appended, again."""
    original = loading.loaded

    def loaded(ctx: Any, snapshot: Snapshot) -> Any:
        if snapshot.owed is not None:
            owed = msgspec.structs.replace(snapshot.owed, stage_opened_at=None)
            snapshot = msgspec.structs.replace(snapshot, owed=owed)
        return original(ctx, snapshot)

    loading.loaded = loaded
    try:
        yield
    finally:
        loading.loaded = original


@contextmanager
def boundary_notices_ahead_of_the_continue_notice() -> Iterator[None]:
    """The stage appends its boundary's notices first, then "Continue from where you left
    off.": a continued request does not end with its boundary's notice."""
    original = commit_plans._open_inference

    def open_inference(
        tx: Transaction, agent_id: str, plan: ConsumeNotices, policy: Any, lifecycle: Any
    ) -> Appended:
        if not plan.continue_response:
            return original(tx, agent_id, plan, policy, lifecycle)
        settings = plan.settings or Settings()
        first = [
            loop_facts.append_record(tx, agent_id, SystemRecord(message=message))
            for message in policy.inference_notices(tx, plan.owed, settings)
        ]
        appended = original(tx, agent_id, plan, plan_ports.KeepEverything(), lifecycle)
        return Appended(records=(*first, *appended.records))

    commit_plans._open_inference = open_inference
    try:
        yield
    finally:
        commit_plans._open_inference = original


@pytest.mark.parametrize(
    "mutant", [stage_reopened_after_a_restart, boundary_notices_ahead_of_the_continue_notice]
)
def test_the_notice_machine_catches_the_mutant(mutant: Callable[[], Any]) -> None:
    with mutant(), pytest.raises(AssertionError):
        run_state_machine_as_test(NoticeMachine, settings=replaying(200))
