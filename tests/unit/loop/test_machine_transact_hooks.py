"""``LoopMachine`` with every transactional lifecycle twin overridden (docs/hooks.md): the
loop carries them in its plans (extra commits: a request's opening, a turn's and a loop's
closing, the settlement's staging) and a twin may refuse. Whatever the interleaving — crashes,
refused and lying commits, aborts, compactions — the machine's promises hold, no stage
stalls, and each twin runs inside the transaction that holds its fact: an opening twin's ids
are the owed fact's in that transaction, the settlement's twin finds the owed fact erased.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, get_args

from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from agentkeep.errors import CommitOutcomeUnknownError
from agentkeep.loop.effects import Commit, Effect
from agentkeep.loop.events import CommitFailed, CommitLanded, Event
from agentkeep.loop.machine import AgentLoop
from agentkeep.loop.plans import LifecycleHook, TransactHookName
from agentkeep.runtime import commit_plans, plan_ports
from agentkeep.types import AssistantBlock, Settings

from .test_machine_properties import AGENT, Disk, LoopMachine, Process

TWINS = frozenset(get_args(TransactHookName))


def _durable_with(owed: Any, hook: LifecycleHook) -> bool:
    """Whether the owed fact holds the ids ``hook`` is told (its request's too)."""
    ids = hook.ids
    if owed is None or (owed.loop_id, owed.turn_id) != (ids.loop_id, ids.turn_id):
        return False
    return hook.hook != "before_inference_transact" or owed.inference_id == ids.inference_id


class Twins:
    """The features' twins as the writer runs them: each may be armed to refuse once; a
    settlement's twin checks its id is the one staged with the owed work."""

    def __init__(self, refusing: list[str], told: list[tuple[str, Any]], broken: list[str]) -> None:
        self.refusing = refusing
        self.told = told
        self.broken = broken  # what a twin saw that breaks a promise (an invariant reads it)

    def run(self, tx: Any, hook: LifecycleHook) -> None:
        owed, ids = tx.facts.read_owed(AGENT), hook.ids
        if hook.hook == "after_agent_settled_transact":
            # Inside the settling transaction, the owed fact erased; told a settlement id.
            if owed is not None or ids.settlement_id is None:
                self.broken.append(f"settled twin saw owed={owed} ids={ids}")
        elif hook.hook.startswith("before_") and not _durable_with(owed, hook):
            # An opening twin runs inside the commit that writes its ids with the owed work.
            self.broken.append(f"{hook.hook} told {ids}, owed {owed}")
        self._maybe_refuse(hook.hook)
        self.told.append((hook.hook, ids))

    def block(self, tx: Any, hook: LifecycleHook, block: AssistantBlock) -> None:
        self._maybe_refuse(hook.hook)
        self.told.append((hook.hook, hook.ids))

    def _maybe_refuse(self, hook: str) -> None:
        if hook in self.refusing:
            self.refusing.remove(hook)
            raise RuntimeError(f"{hook} refuses")


class TwinProcess(Process):
    """A process whose features override every twin: no eager settlement, no consumption at
    acceptance (as the actor builds the core), its commits run the twins."""

    def __init__(
        self,
        disk: Disk,
        ids: Callable[[], str],
        ledger: list[tuple[str, str]],
        twins: Twins,
    ) -> None:
        super().__init__(disk, ids, ledger, eager=False)
        self.core = AgentLoop(
            AGENT,
            new_id=ids,
            defaults=Settings(provider="local", model="gym-1"),
            transact_hooks=TWINS,
        )
        self.twins = twins

    def carry_out(self, effect: Effect) -> list[Event]:
        if not isinstance(effect, Commit):
            return super().carry_out(effect)
        plan = effect.plan
        try:
            value = self.disk.transact(
                lambda tx: commit_plans.execute(
                    tx,
                    AGENT,
                    plan,
                    plan_ports.KeepEverything(),
                    commit_plans.NO_TOOL_CALL_HOOKS,
                    self.twins,
                )
            )
        except CommitOutcomeUnknownError as error:
            return [CommitFailed(plan=plan, message=str(error), outcome_unknown=True)]
        except Exception as error:
            return [CommitFailed(plan=plan, message=str(error))]
        return [CommitLanded(plan=plan, value=value)]


class TwinMachine(LoopMachine):
    def __init__(self) -> None:
        super().__init__()
        self.refusing: list[str] = []
        self.told: list[tuple[str, Any]] = []
        self.broken: list[str] = []
        self.process = self.new_process()

    def new_process(self) -> TwinProcess:
        twins = Twins(self.refusing, self.told, self.broken)
        return TwinProcess(self.disk, self.ids, self.ledger, twins)

    @invariant()
    def each_twin_runs_with_its_fact(self) -> None:
        assert not self.broken, self.broken

    @rule(hook=st.sampled_from(sorted(TWINS)))
    def a_twin_refuses_next_time(self, hook: str) -> None:
        self.refusing.append(hook)

    def teardown(self) -> None:
        self.refusing.clear()  # the clean process settles with every twin willing
        super().teardown()

    def _drive_to_quiescence(self) -> None:
        self.refusing.clear()
        super()._drive_to_quiescence()


TwinMachine.TestCase.settings = LoopMachine.TestCase.settings
test_transactional_twins_under_random_interleavings = TwinMachine.TestCase


def test_the_twins_are_told_in_their_order_with_their_ids() -> None:
    """One message, answered: every twin once, in the loop's order; the request's twins and
    its block's told its inference id, the settlement's a settlement id."""
    machine = TwinMachine()
    try:
        machine.accept(queue="send", at_acceptance=False)
        machine._run_until_idle()
        hooks = [hook for hook, _ in machine.told]
        assert hooks[:3] == [
            "before_agent_loop_transact",
            "before_turn_transact",
            "before_inference_transact",
        ]
        assert hooks[-3:] == [
            "after_turn_transact",
            "after_agent_loop_transact",
            "after_agent_settled_transact",
        ]
        assert "on_event_transact" in hooks
        assert "after_inference_transact" in hooks
        ids = dict(machine.told)
        request = ids["before_inference_transact"].inference_id
        assert request is not None
        assert ids["after_inference_transact"].inference_id == request
        assert ids["on_event_transact"].inference_id == request
        assert ids["after_agent_settled_transact"].settlement_id is not None
        assert machine.disk.read(lambda tx: tx.facts.read_owed(AGENT)) is None
    finally:
        machine.disk.close()
        machine.directory.cleanup()
