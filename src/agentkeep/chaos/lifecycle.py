"""``lifecycle_races``: create / delete / resolve / close / shutdown racing sends.

One seed plays two processes on one state directory:

1. *The race.* A system opens with a few *resident* agents. Threads released by one barrier
   then race (:mod:`agentkeep.chaos.lifecycle_race`): senders with explicit message ids (some
   sent twice), several creators of each *newcomer* id, a create of a live resident's id,
   deleters (some re-creating the id at once), resolves and metadata updates, and one or two
   closers (``close`` or ``shutdown``) that wait for a seeded amount of progress. The disk is
   then read through a fresh open: the lock must be free.
2. *The reopen.* A new process opens the store and resumes what is owed, re-offers every
   message id (durable ones must be idempotent repeats, refused ones new), re-creates each
   deleted id (which must start clean) and waits for every agent to settle.

The checks (:mod:`agentkeep.chaos.lifecycle_checks`, and the shared
:class:`~agentkeep.chaos.checker.Checker` per agent, with its ledger and turn checks) judge
every raced call, the disk after each process, and the final conversations: each accepted
message once and answered, nothing owed. A subscriber per surviving resident
(:class:`~agentkeep.chaos.ledger_subscriber.SubscriberGroup`) races too, ends with the close
and resumes in the reopened process: its log must be exactly the final ledger (``L4``).
The plan is a pure function of the seed; only the thread interleaving is not.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from agentkeep.agent_system import Agent, AgentSystem
from agentkeep.chaos.backend import fresh_database
from agentkeep.chaos.batches import BatchingModel, CompletionOrder
from agentkeep.chaos.campaign_result import CampaignResult
from agentkeep.chaos.checker import Checker
from agentkeep.chaos.invariants import Violation
from agentkeep.chaos.ledger_subscriber import SubscriberGroup
from agentkeep.chaos.lifecycle_checks import (
    Facts,
    judge_deletes,
    judge_fragile,
    judge_hangs,
    judge_ops,
    judge_probes,
    judge_reborn,
    present,
    unanswered,
    violation,
)
from agentkeep.chaos.lifecycle_race import HUNG, Plan, Race, bounded
from agentkeep.chaos.process import DurableState, Offer, ProcessReport, read_durable
from agentkeep.chaos.tools import Ledger, guard_tool, ledger_tools
from agentkeep.chaos.world import ChaosWorld
from agentkeep.delivery import Delivery
from agentkeep.errors import (
    AgentClosedError,
    StoreLockedError,
    UnknownAgentError,
)
from agentkeep.messages import user
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.opening import open_store
from agentkeep.providers.catalog import Providers

SUITE = "lifecycle_races"
TIMEOUT = 20.0  # bound of every wait, delete and close; a call still running after 2× hung
FRAGILE = frozenset({"fragile_tool"})

Snapshot = tuple[list[str], dict[str, DurableState]]


def lifecycle_races(seed: int, *, home: str | Path | None = None) -> CampaignResult:
    """Creators of colliding ids, senders with explicit (sometimes repeated) message ids,
    deleters (some re-creating the id at once), resolves, metadata updates and one or two
    closers (close or shutdown) race, released by one barrier; a new process then answers
    what is owed: every accepted message once and answered, every refusal an agentkeep error
    its race explains, deleted ids free and clean, no hang, the lock free once close returned."""
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix=f"chaos-{SUITE}-{seed}-") as scratch,
        fresh_database() as database,
    ):
        campaign = _Lifecycle(seed, Path(home or scratch) / "state", database)
        campaign.play()
    return CampaignResult(
        suite=SUITE,
        seed=seed,
        violations=campaign.violations,
        processes=campaign.trace,
        seconds=time.monotonic() - started,
    )


class _Lifecycle:
    """One seed of the campaign (see the module docstring)."""

    def __init__(self, seed: int, home: Path, database: str | None = None) -> None:
        self.seed = seed
        self.home = home
        self.database = database
        self.plan = Plan.draw(random.Random(seed))
        self.ledger = Ledger()
        self.alive: dict[int, bool] = {}
        self.system: AgentSystem | None = None  # the running process's system
        # Batches of 1-3 calls finishing in a seeded order, so invariant I14 is checked here too.
        self.completion = CompletionOrder(seed, dispatched=self._dispatched)
        self.checkers: dict[str, Checker] = {}
        survivors = [r for r in self.plan.residents if r not in self.plan.doomed]
        self.subscribers = SubscriberGroup(home.parent, survivors, seed)
        self.violations: list[Violation] = []
        self.trace = [self.plan.describe()]

    def play(self) -> None:
        facts = self._race()
        if facts is None:
            return
        snapshot = self._disk(facts)
        if snapshot is not None:
            self._reopen(facts, snapshot[1])
        for agent, checker in self.checkers.items():
            self.violations += [
                violation(v.invariant, v.process, v.detail, agent) for v in checker.violations
            ]
        self.violations += judge_fragile(self.ledger.entries, FRAGILE)
        if self.completion.timeouts:  # a harness defect: the seeded finish order was not kept
            self.trace.append(f"completion order: holds timed out: {self.completion.timeouts}")

    # -- process 1: the race ---------------------------------------------------------------

    def _race(self) -> Facts | None:
        system = self._open(1)
        for resident in self.plan.residents:
            system.create(id=resident)
        # L4: a subscriber per surviving resident races too, disconnecting at seeded points.
        self.subscribers.start(system, 1)
        race = Race(
            system,
            self.plan,
            self.home,
            TIMEOUT,
            on_closed=partial(self._dead, 1),
            database=self.database,
        )
        stuck = race.run()
        facts = Facts.of(race)
        self.trace += [f"process 1: {op.describe()}" for op in race.ops]
        self.violations += judge_ops(facts) + judge_probes(race) + judge_deletes(facts, race)
        if stuck:  # a hung system cannot be judged further; free it as well as we can
            self.violations += judge_hangs(race, stuck)
            bounded(partial(system.close, timeout_seconds=1.0), TIMEOUT)
            return None
        self.violations += judge_closed_system(system, self.plan.residents[0], TIMEOUT)
        self.violations += [
            violation("L4", 1, "its subscriber still waits after close returned", agent)
            for agent in self.subscribers.still_running(TIMEOUT)
        ]
        self.violations += [
            violation(18, 1, f"{e.tool} ran after close returned", e.agent_id)
            for e in self.ledger.refused
            if e.generation == 1
        ]
        return facts

    def _disk(self, facts: Facts) -> Snapshot | None:
        """The disk after the race, read through a fresh open (the lock must be free)."""
        agents = [*self.plan.residents, *self.plan.newcomers]

        def read(tx: Transaction) -> Snapshot:
            listed = sorted(row.id for row in tx.agents.live())
            return listed, {agent: read_durable(tx, agent) for agent in agents}

        try:
            store = open_store(self.home, database=self.database)
        except StoreLockedError as error:
            self.violations.append(violation(23, 1, f"the store is still locked: {error}"))
            return None
        try:
            listed, states = store.read(read)
        finally:
            store.close()
        if listed != sorted(facts.live()):
            detail = f"agents {listed} after the race, expected {sorted(facts.live())}"
            self.violations.append(violation(18, 1, detail))
        for agent in facts.live():
            self._judge_disk(facts, agent, states[agent])
        return listed, states

    def _judge_disk(self, facts: Facts, agent: str, state: DurableState) -> None:
        """The shared checks; refused means not accepted (invariant I1); a re-created id starts
        clean (invariant I25); after ``close`` everything accepted is answered (invariant I25)."""
        checker = self._checker(agent, facts)
        checker.world.accept_order = sorted(facts.accepted(agent))
        checker.after_process(ProcessReport(generation=1, faults=None))
        found = [
            violation(1, 1, f"{message!r} was refused, yet it reached the agent", agent)
            for message in sorted(facts.refused(agent) & present(state))
        ]
        found += judge_reborn(facts, agent, state)
        if {self.plan.ending, self.plan.second_closer} <= {"close", None}:
            found += [
                violation(18, 1, f"close returned with the agent owing {problem}", agent)
                for problem in unanswered(state)
            ]
        self.violations += found

    # -- process 2: the reopen -------------------------------------------------------------

    def _reopen(self, facts: Facts, states: dict[str, DurableState]) -> None:
        try:
            system = self._open(2)
        except StoreLockedError as error:
            self.violations.append(violation(23, 2, f"reopen refused: {error}"))
            return
        offers: dict[str, list[Offer]] = {}
        idle: dict[str, bool] = {}
        try:
            self._judge_metadata(system, facts)
            for agent in facts.live():
                offers[agent] = self._reoffer(system, facts, agent, states[agent])
            for agent in facts.gone():
                offers[agent] = self._recreate(system, facts, agent)
            for agent in offers:
                idle[agent] = Agent(system, agent).wait_for_idle(timeout_seconds=TIMEOUT)
            # Idle: each subscriber resumes from its last event and drains to the tail.
            self.subscribers.start(system, 2)
            self.subscribers.drain(system)
        except Exception as error:  # the reopened system must simply work
            self.violations.append(violation(18, 2, f"the reopened system raised {error!r}"))
        finally:
            closed = bounded(partial(system.close, timeout_seconds=TIMEOUT), 2 * TIMEOUT)
            self._dead(2)
        self.trace.append(
            f"process 2: re-offered {sum(map(len, offers.values()))} message(s) to "
            f"{sorted(offers)}, re-created {facts.gone()}, idle {idle}"
        )
        if closed is not None:  # the disk cannot be read while it is still held
            invariant = 20 if closed is HUNG else 18
            self.violations.append(violation(invariant, 2, f"closing it gave {closed!r}"))
            return
        for agent, agent_offers in offers.items():
            self._judge_final(agent, agent_offers, idle.get(agent, False))
        for agent in self.subscribers.logs:
            ledger = self.checkers[agent].events if agent in self.checkers else []
            found = self.subscribers.judge(agent, ledger, final_generation=2)
            self.violations += [violation(v.invariant, v.process, v.detail, agent) for v in found]

    def _judge_metadata(self, system: AgentSystem, facts: Facts) -> None:
        """The durable metadata is the winning create's and the last update's (invariant I25)."""
        for agent, won in facts.winners.items():
            if won and system.metadata(agent).get("creator") != won[0].note:
                detail = f"metadata {system.metadata(agent)}, yet {won[0].describe()} won"
                self.violations.append(violation(18, 2, detail, agent))
        for agent in facts.live():
            updates = [o for o in facts.ops if o.kind == "metadata" and o.agent == agent and o.ok]
            if updates and agent not in facts.reborn:
                value = system.metadata(agent).get("k")
                if value != updates[-1].note:
                    detail = f"metadata k={value}, the last update wrote {updates[-1].note}"
                    self.violations.append(violation(18, 2, detail, agent))

    def _reoffer(
        self, system: AgentSystem, facts: Facts, agent: str, state: DurableState
    ) -> list[Offer]:
        """Every id offered again: a durable one is an idempotent repeat, any other is new
        (invariant I1)."""
        offers: dict[str, Offer] = {}
        for op in facts.sends(agent):
            message = op.message or ""
            offers.setdefault(message, Offer(id=message, text=message))
        durable = present(state)
        for offer in offers.values():
            delivery = self._deliver(system, agent, offer.id)
            if delivery is not None and delivery.created is (offer.id in durable):
                said = "durable" if offer.id in durable else "not durable"
                detail = f"re-offering {offer.id!r} ({said}) gave {delivery}"
                self.violations.append(violation(1, 2, detail, agent))
        return list(offers.values())

    def _recreate(self, system: AgentSystem, facts: Facts, agent: str) -> list[Offer]:
        """A deleted id is unknown, then free: re-created, it starts clean and accepts an id
        of its previous life as new (invariant I25)."""

        def bad(detail: str) -> None:
            self.violations.append(violation(18, 2, detail, agent))

        refusal = bounded(partial(system.resolve, agent), TIMEOUT)
        if not isinstance(refusal, UnknownAgentError):
            bad(f"resolve of the deleted id gave {refusal!r}, not UnknownAgentError")
        error = bounded(partial(system.create, id=agent), TIMEOUT)
        if error is not None:
            bad(f"re-creating the deleted id failed: {error!r}")
            return []
        state = system.internals.store.read(lambda tx: read_durable(tx, agent))
        if state.records or state.queued or state.pending or state.owed is not None:
            bad(f"re-created, it is not clean: {state}")
        sent = [op.message for op in facts.sends(agent) if op.message]
        message = sent[0] if sent else f"{agent}fresh"
        delivery = self._deliver(system, agent, message)
        if delivery is not None and not delivery.created:
            bad(f"re-created, it still holds the message id {message!r}")
        return [Offer(id=message, text=message)]

    def _judge_final(self, agent: str, offers: list[Offer], idle: bool) -> None:
        """The shared checks, and the final ones: each offer once, answered, nothing owed."""
        checker = self.checkers.get(agent) or self._checker(agent, None)
        checker.world.offers = list(offers)
        checker.world.accept_order = [o.id for o in offers]
        report = ProcessReport(generation=2, faults=None, idle=idle)
        # An agent never sent anything has no answer to end on: it must hold nothing.
        checker.after_process(report, final=bool(offers))
        state = checker.previous
        if not offers and state is not None and (state.records or state.owed is not None):
            detail = f"sent nothing, it holds {len(state.records)} records, owed {state.owed}"
            self.violations.append(violation(1, 2, detail, agent))

    # -- helpers ---------------------------------------------------------------------------

    def _open(self, generation: int) -> AgentSystem:
        self.alive[generation] = True
        providers = Providers()
        model = BatchingModel(seed=self.seed, latency_seconds=self.plan.latency)
        providers.add("local", model, kind="gym")
        alive: Callable[[], bool] = partial(self.alive.__getitem__, generation)
        tools = [
            guard_tool(t, self.ledger, generation, alive, self.completion) for t in ledger_tools()
        ]
        self.system = AgentSystem.open(
            self.home,
            providers=providers,
            provider="local",
            model="gym-1",
            tools=tools,
            database=self.database,
        )
        return self.system

    def _dispatched(self, agent_id: str) -> frozenset[str] | None:
        system = self.system
        if system is None:
            return None
        try:
            pending = system.internals.store.read(lambda tx: tx.calls.pending(agent_id))
        except Exception:  # closed or closing: its calls' order no longer matters
            return None
        return frozenset(p.call.call_id for p in pending)

    def _dead(self, generation: int) -> None:
        self.alive[generation] = False

    def _checker(self, agent: str, facts: Facts | None) -> Checker:
        world = ChaosWorld(
            self.home, self.seed, agent_id=agent, fragile_tools=FRAGILE, database=self.database
        )
        world.order_known = False  # concurrent senders have no acceptance order to keep
        if facts is not None:
            tried = dict.fromkeys(op.message or "" for op in facts.sends(agent))
            world.offers = [Offer(id=m, text=m) for m in tried]
        world.ledger = Ledger()  # the fragile-tool check runs over every agent at once
        checker = Checker(world)
        self.checkers[agent] = checker
        return checker

    def _deliver(self, system: AgentSystem, agent: str, message: str) -> Delivery | None:
        """Send in the new process; failing or hanging there is a violation (invariant I1)."""
        delivered: list[Delivery] = []
        send = Agent(system, agent).send
        error = bounded(lambda: delivered.append(send(user(message), id=message)), TIMEOUT)
        if error is not None:
            detail = f"sending {message!r} in the new process failed: {error!r}"
            self.violations.append(violation(1, 2, detail, agent))
        return delivered[0] if delivered else None


def judge_closed_system(system: AgentSystem, agent: str, timeout: float) -> list[Violation]:
    """After close/shutdown returned, the old system admits nothing (invariant I25): each write is
    refused with AgentClosedError (reads too: every operation passes the admission gate),
    and a second close or shutdown returns at once."""
    refused_with: dict[str, tuple[Callable[[], object], tuple[type[Exception], ...]]] = {
        "send": (
            partial(Agent(system, agent).send, user("late"), id="late"),
            (AgentClosedError,),
        ),
        "create": (partial(system.create, id="latecomer"), (AgentClosedError,)),
        "delete": (partial(system.delete, agent), (AgentClosedError,)),
        "metadata": (partial(system.update_metadata, agent, {"late": 1}), (AgentClosedError,)),
        "resolve": (partial(system.resolve, agent), (AgentClosedError,)),
        "close": (partial(system.close, timeout_seconds=timeout), ()),
        "shutdown": (system.shutdown, ()),
    }
    found: list[Violation] = []
    for name, (action, expected) in refused_with.items():
        outcome = bounded(action, timeout)
        if outcome is HUNG:
            found.append(violation(20, 1, f"{name} on the closed system never returned"))
        elif (outcome is None and expected) or (
            isinstance(outcome, Exception) and not isinstance(outcome, expected)
        ):
            wanted = " or ".join(e.__name__ for e in expected) or "to return"
            found.append(
                violation(18, 1, f"{name} on the closed system gave {outcome!r}, not {wanted}")
            )
    return found


__all__ = ["SUITE", "lifecycle_races"]
