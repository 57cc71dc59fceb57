"""The inference stage's one opening transaction (docs/lifecycle.md, docs/notices.md,
docs/hooks.md) in the loop core's property machine: the core is built as for features that
supply notices at both boundaries, inject notices, prepare each request (compacting at
random) AND override every transactional lifecycle twin, refusing at random. Besides every
promise the base machine and the twins' machine check, under random interleavings, failing
and lying commits, crashes, aborts and compactions:

- one inference id per request: the request is made under the id its stage's
  ``system_notifications_transact`` and its ``before_inference_transact`` were told in a
  committed transaction, and ``before_inference`` is told it too (with the same loop and
  turn as the twin);
- the stage's hooks run once per request: a committed boundary notice and a committed
  ``before_inference_transact`` per request id, however often the process crashed between
  the stage and its request;
- ``before_inference_transact`` runs last in the stage's transaction: the owed fact names its
  id marked opened at the conversation's length, and the history ends with its boundary's
  notice;
- notices exactly once at their boundary: each message's notice right before its user
  record, each injected notice in the history at most once (exactly once unless an abort
  dropped the work it was owed), only in a stage (followed by its boundary's notice).

Each mutant below breaks one of these promises, and the machine catches it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import msgspec
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule, run_state_machine_as_test

import agentkeep as ak
from agentkeep.delivery import accept_notice
from agentkeep.errors import CommitOutcomeUnknownError
from agentkeep.loop import inference, loading
from agentkeep.loop.effects import Commit, Effect, Observe, RunHook, StartInference
from agentkeep.loop.events import (
    CommitFailed,
    CommitLanded,
    Event,
    HookFinished,
    Start,
    WorkAccepted,
)
from agentkeep.loop.machine import AgentLoop
from agentkeep.loop.plans import ConsumeNotices, LifecycleHook, Snapshot
from agentkeep.persistence.interface import Transaction
from agentkeep.runtime import commit_plans, plan_ports
from agentkeep.types import Settings, SystemMessage, TextBlock
from agentkeep.types.records import OwedWork, QueuedMessage, SystemRecord, UserRecord

from .test_machine_properties import AGENT, Disk, replaying
from .test_machine_transact_hooks import TWINS, TwinMachine, TwinProcess, Twins

NOTICES = ("message ", "inference ", "inject ")  # what the features' notices start with


def _text(message: object) -> str:
    blocks = getattr(message, "content", ())
    return "".join(b.text for b in blocks if isinstance(b, TextBlock))


class Told:
    """What the hooks were told, split by whether their transaction committed: a hook
    appends to ``pending``; the process moves it to ``committed`` once its commit landed."""

    def __init__(self) -> None:
        self.pending: list[tuple[str, Any]] = []
        self.committed: list[tuple[str, Any]] = []

    def land(self) -> None:
        self.committed.extend(self.pending)
        self.pending.clear()

    def count(self, hook: str, inference_id: str) -> int:
        return sum(1 for h, ids in self.committed if h == hook and ids == inference_id)


class StagePolicy(plan_ports.KeepEverything):
    """A feature's ``system_notifications_transact``: one notice at each boundary, naming
    it (a message's by its id, a request's by its inference id)."""

    def __init__(self, told: Told) -> None:
        self.told = told

    def message_notices(
        self, tx: Transaction, entry: QueuedMessage, settings: Settings
    ) -> Sequence[SystemMessage]:
        return [ak.system(f"message {entry.id}")]

    def inference_notices(
        self, tx: Transaction, owed: OwedWork, settings: Settings
    ) -> Sequence[SystemMessage]:
        self.told.pending.append(("system_notifications_transact", owed.inference_id))
        return [ak.system(f"inference {owed.inference_id}")]


class StageTwins(Twins):
    """The twins (refusing at random, checked as in the twins' machine), and
    ``before_inference_transact`` checked against the stage it must close."""

    def __init__(self, refusing: list[str], told: Told, broken: list[str]) -> None:
        super().__init__(refusing, [], broken)
        self.stage_told = told

    def run(self, tx: Any, hook: LifecycleHook) -> None:
        if hook.hook == "before_inference_transact":
            owed, ids = tx.facts.read_owed(AGENT), hook.ids
            records = tx.records.load(AGENT)
            last = _text(records[-1].message) if records and hasattr(records[-1], "message") else ""
            if (
                owed is None
                or owed.inference_id != ids.inference_id
                or owed.stage_opened_at != len(records)
                or last != f"inference {ids.inference_id}"
            ):
                self.broken.append(f"before_inference_transact told {ids} outside its stage")
        super().run(tx, hook)  # may refuse: nothing of it is told then
        if hook.hook == "before_inference_transact":
            self.stage_told.pending.append((hook.hook, hook.ids.inference_id))
            self.stage_told.pending.append(("twin ids", hook.ids))


class StageProcess(TwinProcess):
    """A process built as for features with every hook of this wave: notices at both
    boundaries, ``prepare_inference`` (answered from ``compacting``), every twin."""

    def __init__(
        self,
        disk: Disk,
        ids: Callable[[], str],
        ledger: list[tuple[str, str]],
        twins: StageTwins,
        compacting: list[bool],
    ) -> None:
        super().__init__(disk, ids, ledger, twins)
        self.core = AgentLoop(
            AGENT,
            new_id=ids,
            defaults=Settings(provider="local", model="gym-1"),
            notify_inference=True,
            prepare_inference=True,
            transact_hooks=TWINS,
        )
        self.stage_twins = twins
        self.stage_told = twins.stage_told
        self.compacting = compacting
        self.observed: Any = None  # the ids before_inference was told last

    def carry_out(self, effect: Effect) -> list[Event]:
        match effect:
            case RunHook(hook="prepare_inference", drop_actions=dropped):
                compact = self.compacting.pop(0) if self.compacting else False
                return [HookFinished(hook="prepare_inference", compact=compact and not dropped)]
            case Observe(hook="before_inference", ids=ids):
                self.observed = ids
                return []
            case Commit(plan=plan):
                return self._commit(plan)
            case StartInference(inference_id=inference_id, messages=messages):
                self._check_request(inference_id, _text(messages[-1]) if messages else "")
        return super().carry_out(effect)

    def _commit(self, plan: Any) -> list[Event]:
        self.stage_told.pending.clear()
        policy = StagePolicy(self.stage_told)
        try:
            value = self.disk.transact(
                lambda tx: commit_plans.execute(
                    tx, AGENT, plan, policy, commit_plans.NO_TOOL_CALL_HOOKS, self.stage_twins
                )
            )
        except CommitOutcomeUnknownError as error:
            self.stage_told.land()  # it landed (this store only lies after committing)
            return [CommitFailed(plan=plan, message=str(error), outcome_unknown=True)]
        except Exception as error:
            self.stage_told.pending.clear()
            return [CommitFailed(plan=plan, message=str(error))]
        self.stage_told.land()
        return [CommitLanded(plan=plan, value=value)]

    def _check_request(self, inference_id: str, last: str) -> None:
        broken = self.stage_twins.broken
        if last != f"inference {inference_id}":
            broken.append(f"request {inference_id} ends with {last!r}, not its boundary")
        for hook in ("system_notifications_transact", "before_inference_transact"):
            times = self.stage_told.count(hook, inference_id)
            if times != 1:
                broken.append(f"request {inference_id}: {hook} committed {times} times")
        observed = self.observed
        if observed is None or observed.inference_id != inference_id:
            broken.append(f"request {inference_id}: before_inference told {observed}")
        twin = [ids for h, ids in self.stage_told.committed if h == "twin ids"]
        twin = [ids for ids in twin if ids.inference_id == inference_id]
        if twin and observed is not None and twin[-1] != observed:
            broken.append(f"request {inference_id}: twin told {twin[-1]}, hook {observed}")


class StageMachine(TwinMachine):
    def __init__(self) -> None:
        self.stage_told = Told()
        self.compacting: list[bool] = []
        self.injected: list[str] = []
        super().__init__()

    def new_process(self) -> StageProcess:
        twins = StageTwins(self.refusing, self.stage_told, self.broken)
        return StageProcess(self.disk, self.ids, self.ledger, twins, self.compacting)

    @rule(times=st.integers(min_value=1, max_value=3))
    def prepare_asks_to_compact(self, times: int) -> None:
        """The feature's next preparations ask for a compaction."""
        self.compacting.extend([True] * times)

    @rule()
    def a_hook_injects_a_notice(self) -> None:
        """A lifecycle action hook's ``InjectAction``, accepted in its own transaction."""
        text = f"inject {next(self.sequence)}"
        try:
            notice = self.disk.transact(lambda tx: accept_notice(tx, AGENT, ak.system(text)))
        except CommitOutcomeUnknownError:
            self.injected.append(text)  # it landed: the system wakes the agent
            self.process.feed(Start())
            return
        except Exception:
            return  # refused: nothing was queued
        self.injected.append(text)
        self.process.feed(WorkAccepted(notice=notice))

    def _history(self) -> list[Any]:
        live = self.disk.read(lambda tx: tx.records.load(AGENT))
        return self.history_log(live)

    @invariant()
    def notices_once_at_their_boundary(self) -> None:
        history = self._history()
        texts = [
            _text(r.message) if isinstance(r, SystemRecord | UserRecord) else None for r in history
        ]
        pairs = zip(texts, history, strict=True)
        seen = Counter(t for t, r in pairs if isinstance(r, SystemRecord))
        twice = sorted(t for t, n in seen.items() if n > 1 and (t or "").startswith(NOTICES))
        assert not twice, f"notices appended twice: {twice}"
        for i, record in enumerate(history):
            if isinstance(record, UserRecord):
                before = texts[i - 1] if i else None
                assert before == f"message {texts[i]}", f"message {texts[i]} after {before!r}"
            elif texts[i] is not None and texts[i].startswith("inject "):  # type: ignore[union-attr]
                # Only in a stage: injects, then the boundary's notice, nothing else between.
                rest = texts[i + 1 :]
                after = next((t for t in rest if not (t or "").startswith("inject ")), None)
                assert (after or "").startswith("inference "), f"{texts[i]} then {after!r}"

    def teardown(self) -> None:
        try:
            self.refusing.clear()
            self._drive_to_quiescence()
            if not self.aborted:
                texts = {_text(r.message) for r in self._history() if isinstance(r, SystemRecord)}
                lost = [text for text in self.injected if text not in texts]
                assert not lost, f"injected notices never appended: {lost}"
        finally:
            super().teardown()


StageMachine.TestCase.settings = TwinMachine.TestCase.settings
test_one_inference_stage_under_random_interleavings = StageMachine.TestCase


# -- mutants: each breaks one promise the machine must catch --------------------------------


@contextmanager
def twin_told_a_stale_id() -> Iterator[None]:
    """The stage tells ``before_inference_transact`` the id the owed fact held before it
    (the request is then made under another)."""
    original = inference.open_stage

    def open_stage(ctx: Any, *, continues: bool) -> ConsumeNotices:
        plan = original(ctx, continues=continues)
        before = ctx.mirror.owed
        if not plan.hooks or before is None or before.inference_id is None:
            return plan
        ids = msgspec.structs.replace(plan.hooks[0].ids, inference_id=before.inference_id)
        stale = LifecycleHook(hook=plan.hooks[0].hook, ids=ids)
        return msgspec.structs.replace(plan, hooks=(stale,))

    inference.open_stage = open_stage  # type: ignore[assignment]
    try:
        yield
    finally:
        inference.open_stage = original  # type: ignore[assignment]


@contextmanager
def twin_ahead_of_the_notices() -> Iterator[None]:
    """``before_inference_transact`` runs first in the stage, before its notices."""
    original = commit_plans._open_inference

    def open_inference(
        tx: Transaction, agent_id: str, plan: ConsumeNotices, policy: Any, lifecycle: Any
    ) -> Any:
        for hook in plan.hooks:
            lifecycle.run(tx, hook)
        bare = msgspec.structs.replace(plan, hooks=())
        return original(tx, agent_id, bare, policy, lifecycle)

    commit_plans._open_inference = open_inference
    try:
        yield
    finally:
        commit_plans._open_inference = original


@contextmanager
def stage_reopened_after_a_restart() -> Iterator[None]:
    """A restart forgets the request's stage opened: its hooks run again for the same id."""
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


@pytest.mark.parametrize(
    "mutant", [twin_told_a_stale_id, twin_ahead_of_the_notices, stage_reopened_after_a_restart]
)
def test_the_stage_machine_catches_the_mutant(mutant: Callable[[], Any]) -> None:
    with mutant(), pytest.raises(AssertionError):
        run_state_machine_as_test(StageMachine, settings=replaying(200))
