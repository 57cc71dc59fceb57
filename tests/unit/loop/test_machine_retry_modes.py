"""The loop core's property machine (``test_machine_properties``) learns retry_forever and
permission modes.

``RetryModesMachine`` extends ``LoopMachine`` with a core built with a ``RetryPolicy``, the
backoff timers it asks for (a rule fires the oldest; nothing else does), a rule that makes the
next 1–4 responses fail after a chosen number of their events (often after some of its calls
streamed), and a rule accepting messages that change the permission mode. After every step,
beyond the base machine's invariants:

- no failure note is written and no turn fails (a failure is retried, the turn stays
  running) — but an abort stops the retrying, and a write of its own wind-down that the
  store refuses takes the give-up path: each abort may leave one note and fail its turn;
- no call is dispatched whose result is already durable (committed effects are never
  replayed by a retry);
- the durable mode is that of the last consumed message that set one, and each tool batch
  was dispatched under the mode in force when its response began (the last such message
  before the call's block).

At the end, driven to quiescence (timers fired as they come), the agent owes nothing.
"""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule, run_state_machine_as_test

import agentkeep as ak
from agentkeep import delivery
from agentkeep.chaos._mutants.retry_modes import (
    mode_changes_at_acceptance,
    retry_gives_up_after_two_failures,
)
from agentkeep.errors import CommitOutcomeUnknownError
from agentkeep.loop.context import RetryPolicy
from agentkeep.loop.effects import (
    Effect,
    LoadState,
    StartInference,
    StartTools,
)
from agentkeep.loop.events import Event, Loaded, LoadFailed, Start, WorkAccepted
from agentkeep.loop.machine import AgentLoop
from agentkeep.runtime import commit_plans
from agentkeep.types import MessageOptions, PermissionMode, Settings, ToolCallBlock, done_error
from agentkeep.types.records import BlockRecord, SystemRecord, ToolRecord, UserRecord

from .test_machine_properties import (
    AGENT,
    Disk,
    LoopMachine,
    Process,
    archived_records,
    replaying,
)

MODES: tuple[PermissionMode, ...] = ("read_only", "workspace_write", "auto", "full_access")


class RetryProcess(Process):
    """A process whose core retries forever; it can make the next response fail."""

    def __init__(
        self, disk: Disk, ids: object, ledger: list[tuple[str, str]], failing: list[int]
    ) -> None:
        super().__init__(disk, ids, ledger)  # type: ignore[arg-type]
        self.core = AgentLoop(
            AGENT,
            new_id=ids,  # type: ignore[arg-type]
            defaults=Settings(provider="local", model="gym-1"),
            eager_settle=True,
            retry=RetryPolicy(initial_seconds=0.01, max_seconds=0.02),
        )
        # The provider's (it outlives a crash): each response started fails after the first
        # entry's count of its events.
        self.failing = failing
        # (provider call id, the core's mode when its batch was dispatched)
        self.dispatched: list[tuple[str, str]] = []
        # calls dispatched although their result was durable (a replayed effect)
        self.replayed: list[str] = []

    def carry_out(self, effect: Effect) -> list[Event]:
        match effect:
            case LoadState():
                # As the actor does: a read the store refuses is a failed load (retried).
                try:
                    snapshot = self.disk.transact(lambda tx: commit_plans.load_snapshot(tx, AGENT))
                except Exception as error:
                    return [LoadFailed(message=str(error))]
                return [Loaded(snapshot=snapshot)]
            case StartTools(runs=runs):
                answered = self.disk.read(
                    lambda tx: {
                        r.message.call_id
                        for r in [*archived_records(tx), *tx.records.load(AGENT)]
                        if isinstance(r, ToolRecord)
                    }
                )
                mode = self.core.settings.permission_mode
                for run in runs:
                    self.dispatched.append((run.call.call_id, mode))
                    if run.call.call_id in answered:
                        self.replayed.append(run.call.call_id)
        events = super().carry_out(effect)
        if isinstance(effect, StartInference) and self.failing:
            after = self.failing.pop(0)
            stream = list(self.streams[effect.inference_id])
            kept = stream[: min(after, len(stream) - 1)]
            failure = done_error("The provider is overloaded.")
            self.streams[effect.inference_id] = deque([*kept, failure])
        return events


class RetryModesMachine(LoopMachine):
    def __init__(self) -> None:
        super().__init__()
        self.modes: dict[str, PermissionMode] = {}
        # An abort stops the retrying: a write of its own wind-down that fails takes the
        # give-up path, so each abort may leave one failure note (and fail its turn).
        self.aborts = 0
        self.failing: list[int] = []
        self.process: RetryProcess = self.new_process()

    def new_process(self) -> RetryProcess:
        return RetryProcess(self.disk, self.ids, self.ledger, self.failing)

    # -- rules -------------------------------------------------------------------------------

    @rule(queue=st.sampled_from(["send", "steering"]), mode=st.sampled_from(MODES))
    def accept_with_mode(self, queue: str, mode: PermissionMode) -> None:
        """A message that changes the permission mode once consumed (through the module's
        ``accept_message``, so a mutant patching it reaches this machine)."""
        message_id = f"msg{next(self.sequence)}"

        def work(tx: object) -> object:
            return delivery.accept_message(
                tx,  # type: ignore[arg-type]
                AGENT,
                queue=queue,  # type: ignore[arg-type]
                message=ak.user(message_id),
                message_id=message_id,
                options=MessageOptions(permission_mode=mode),
                metadata=None,
            )

        try:
            _, queued = self.disk.transact(work)  # type: ignore[misc]
        except CommitOutcomeUnknownError:
            self.accepted.append(message_id)
            self.modes[message_id] = mode
            self.process.feed(Start())
            return
        except Exception:  # refused (the briefly unavailable store): nothing accepted
            return
        self.accepted.append(message_id)
        self.modes[message_id] = mode
        self.process.feed(WorkAccepted(message=queued))

    @rule(after=st.integers(min_value=0, max_value=12), times=st.integers(min_value=1, max_value=4))
    def next_responses_fail(self, after: int, times: int) -> None:
        """The next ``times`` responses each fail after ``after`` of their events (the calls
        streamed so far are answered, never run)."""
        self.process.failing += [after] * times

    @rule()
    def a_backoff_ends(self) -> None:
        if self.process.timers:
            self.process.fire_oldest_timer()

    @rule()
    def abort(self) -> None:
        self.aborts += 1
        super().abort()

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def retrying_never_gives_up_nor_replays(self) -> None:
        live, turns = self.disk.read(
            lambda tx: (tx.records.load(AGENT), tx.turns.page(AGENT, 0, 1000))
        )
        records = self.history_log(live)  # what compactions archived too
        notes = [r for r in records if isinstance(r, SystemRecord) and r.reason == "failure"]
        assert len(notes) <= self.aborts, (
            f"retry_forever: a failure note was written ({len(notes)} notes, {self.aborts} aborts)"
        )
        failed = [t.number for t in turns if t.status == "failed"]
        assert len(failed) <= self.aborts, f"retry_forever: turns {failed} failed"

        assert not self.process.replayed, (
            f"retry_forever: calls {self.process.replayed} dispatched after their result landed"
        )

    @invariant()
    def the_mode_is_the_last_consumed_one(self) -> None:
        live, durable = self.disk.read(
            lambda tx: (tx.records.load(AGENT), tx.facts.read_settings(AGENT))
        )
        records = self.history_log(live)  # a compaction archives the messages that set modes
        mode: str = "auto"
        at_call: dict[str, str] = {}
        for record in records:
            if isinstance(record, UserRecord) and record.message_id in self.modes:
                mode = self.modes[record.message_id]
            elif isinstance(record, BlockRecord) and isinstance(record.block, ToolCallBlock):
                at_call.setdefault(record.block.call_id, mode)
        durable_mode = durable.permission_mode if durable is not None else "auto"
        assert durable_mode == mode, f"durable mode {durable_mode}, last consumed {mode}"
        for call_id, seen in self.process.dispatched:
            expected = at_call.get(call_id)
            assert expected is None or seen == expected, (
                f"{call_id} dispatched under {seen}, its response began under {expected}"
            )

    def _step_in_flight(self, process: Process) -> bool:
        if super()._step_in_flight(process):
            return True
        assert isinstance(process, RetryProcess)
        if process.timers:
            process.fire_oldest_timer()
            return True
        return False


RetryModesMachine.TestCase.settings = settings(
    max_examples=int(__import__("os").environ.get("LOOP_MACHINE_EXAMPLES", "60")),
    stateful_step_count=40,
    deadline=None,
)
test_retry_forever_and_modes_under_random_interleavings = RetryModesMachine.TestCase

_REPLAY = replaying(100)


def test_the_machine_catches_a_retry_that_gives_up() -> None:
    """Mutant: two failures in a row fall back to the give-up path: a failure note, or (the
    provider still failing at the end) a run that stops owing work with nobody stopping it."""
    with (
        retry_gives_up_after_two_failures(),
        pytest.raises(
            AssertionError,
            # Giving up leaves a note, a run owing work with nobody stopping it, or a response
            # cut by the failure and never continued (C2).
            match=r"retry_forever: (a failure note|turns)|the agent still owes work|C2: ",
        ),
    ):
        run_state_machine_as_test(RetryModesMachine, settings=_REPLAY)


def test_the_machine_catches_a_mode_changed_at_acceptance() -> None:
    """Mutant: accepting a message that sets a mode writes it to the settings at once."""
    with (
        mode_changes_at_acceptance(),
        pytest.raises(AssertionError, match=r"durable mode|its response began under"),
    ):
        run_state_machine_as_test(RetryModesMachine, settings=_REPLAY)


def test_a_response_failing_right_after_a_finished_block_is_continued_after_a_restart() -> None:
    """Found by this machine exploring at random: a response's reasoning block finishes and
    its stream fails at once, so the block lands with the response's end; retrying, the
    process dies during the backoff. The response was cut short: the restart must continue
    it (C2), not read the block as a finished answer and settle over it."""
    machine = RetryModesMachine()
    machine.next_responses_fail(after=3, times=1)  # reasoning start, delta, end; then error
    machine.accept(at_acceptance=False, queue="send")
    machine.stream_events(count=4, pick=0)
    machine.durable_state_keeps_its_promises()
    owed = machine.disk.read(lambda tx: tx.facts.read_owed(AGENT))
    assert owed is not None
    assert owed.response_open, "the cut response's content was marked finished"
    machine.teardown()  # a fresh process drives it to quiescence; C2 is checked there
