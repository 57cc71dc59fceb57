"""Compactions in the loop core's property machine (``test_machine_properties``).

``HookCompactionMachine`` reaches the core's compactions the other way: action hooks asking for
them (before a turn, after one, after the agent loop). The compaction mutants below each break
one promise the machine's compaction rules must catch; the last test pins the sequence the
machine found exploring at random (a compaction that sealed a question an abort had left
unanswered).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import msgspec
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import rule, run_state_machine_as_test

from agentkeep.loop import compaction
from agentkeep.loop.effects import CompactionResolved, Effect, RunHook, StartCompaction
from agentkeep.loop.events import Event, HookFinished, Start
from agentkeep.loop.plans import ReplaceWithCompaction
from agentkeep.loop.texts import ABORTED_COMPACTION
from agentkeep.runtime import commit_plans
from agentkeep.types.records import BlockRecord

from .test_machine_properties import Disk, LoopMachine, Process, replaying


class HookProcess(Process):
    """A process whose features override the action hooks: the core settles in its own
    transaction and offers nothing at acceptance (a hook may add work), and the hooks named
    in ``compacting`` ask for a compaction (a ``CompactAction``) the next times they run —
    unless their actions are dropped (after an abort), as the actor drops them."""

    def __init__(
        self,
        disk: Disk,
        ids: Callable[[], str],
        ledger: list[tuple[str, str]],
        compacting: list[str],
    ) -> None:
        super().__init__(disk, ids, ledger, eager=False)
        self.compacting = compacting  # the features' (outlives a crash)

    def carry_out(self, effect: Effect) -> list[Event]:
        if isinstance(effect, RunHook) and effect.hook in self.compacting:
            self.compacting.remove(effect.hook)
            if not effect.drop_actions:
                return [HookFinished(hook=effect.hook, compact=True)]
        return super().carry_out(effect)


class HookCompactionMachine(LoopMachine):
    """``LoopMachine`` with hooks that ask for compactions (the other way one reaches the
    core): before a turn, after one, or after the agent loop, which then reopens."""

    def __init__(self) -> None:
        super().__init__()
        self.compacting: list[str] = []
        self.process = self.new_process()

    def new_process(self) -> HookProcess:
        return HookProcess(self.disk, self.ids, self.ledger, self.compacting)

    @rule(hook=st.sampled_from(["before_turn", "after_turn", "after_agent_loop"]))
    def a_hook_asks_to_compact(self, hook: str) -> None:
        self.compacting.append(hook)


HookCompactionMachine.TestCase.settings = LoopMachine.TestCase.settings
test_hook_compactions_under_random_interleavings = HookCompactionMachine.TestCase


# -- compaction mutants: each breaks one promise the compaction rules must catch -------------


@contextmanager
def compaction_summarises_a_view_short_of_its_first_message() -> Iterator[None]:
    """The compaction is given the provider view without its first message, yet replaces
    the whole history it started from: that message leaves the provider's view unsummarised."""
    original = compaction.start

    def start(ctx: Any) -> Any:
        outcome = original(ctx)
        ctx.out[:] = [
            msgspec.structs.replace(e, messages=e.messages[1:])
            if isinstance(e, StartCompaction)
            else e
            for e in ctx.out
        ]
        return outcome

    compaction.start = start
    try:
        yield
    finally:
        compaction.start = original


@contextmanager
def compaction_deletes_what_it_replaces() -> Iterator[None]:
    """The replacement lands without archiving the records it replaces (invariant I23 broken): the
    consumed messages among them are gone."""
    original = commit_plans._replace_with_compaction

    def replace(tx: Any, agent_id: str, plan: ReplaceWithCompaction, *rest: Any) -> None:
        archive = tx.archive.add_epoch
        tx.archive.add_epoch = lambda *args, **kwargs: None
        try:
            original(tx, agent_id, plan, *rest)
        finally:
            tx.archive.add_epoch = archive

    commit_plans._replace_with_compaction = replace
    try:
        yield
    finally:
        commit_plans._replace_with_compaction = original


@contextmanager
def aborted_compactions_go_unanswered() -> Iterator[None]:
    """A compaction an abort cancels never answers its waiters."""
    original = compaction.resolve

    def resolve(ctx: Any, *, error: str | None) -> None:
        original(ctx, error=error)
        if error == ABORTED_COMPACTION:
            ctx.out[:] = [e for e in ctx.out if not isinstance(e, CompactionResolved)]

    compaction.resolve = resolve
    try:
        yield
    finally:
        compaction.resolve = original


@pytest.mark.parametrize(
    ("mutant", "caught", "examples"),
    [
        (compaction_summarises_a_view_short_of_its_first_message, r"the provider's view holds", 60),
        (compaction_deletes_what_it_replaces, r"§7\.1: the accepted messages", 60),
        # An abort during a compaction is rarer: the derandomized run meets it later.
        (aborted_compactions_go_unanswered, r"left compact\(\) waiting", 200),
    ],
)
def test_the_machine_catches_a_broken_compaction(
    mutant: Callable[[], AbstractContextManager[None]], caught: str, examples: int
) -> None:
    """Each mutant breaks one compaction promise; the machine's compaction rules reach it
    and its checks fail. Derandomized and unshrunk, so the catch is the same every run."""
    with mutant(), pytest.raises(AssertionError, match=caught):
        run_state_machine_as_test(LoopMachine, settings=replaying(examples))


def test_a_question_an_abort_left_unanswered_is_still_answered_after_a_compaction() -> None:
    """Found by this machine exploring at random (shrunk by hand). An abort settles a run
    whose consumed message was never answered: not owed, but an explicit start answers it
    (docs/decisions.md, "Abort with input still queued keeps the owed fact"). A compaction
    then keeps the message in its summary; it used to record ``owes_answer=False`` (the
    aborted turn owed no inference), so an explicit start found nothing to answer."""
    machine = LoopMachine()
    machine.accept(at_acceptance=False, queue="send")
    machine.abort()
    machine.stream_events(count=1, pick=0)  # the cancelled stream stops
    machine.request_compaction()
    machine.compaction_finishes(pick=0, outcome="summary", fault="none")
    machine.process = Process(machine.disk, machine.ids, machine.ledger)
    machine.process.feed(Start(explicit=True))
    machine._run_until_idle()
    records = machine.durable()[0]
    last = records[-1]
    machine.teardown()  # closes the disk (and fails on the unanswered tail too)
    assert isinstance(last, BlockRecord), f"the explicit start left {last} unanswered"
