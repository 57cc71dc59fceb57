"""The ``extensions`` suite: a system's extension surface under seeded crashes.

Every process opens the system with a module (``extmod``) whose keyed migrations each write
two rows into the module's table, and whose hooks (a :class:`~agentkeep.ModuleHooks`, so a
feature of every agent):

- answer ``system_notifications_transact`` at both boundaries with a notice naming the
  boundary (the message id, the inference id) and the history epoch it was written in, and
  write a ``history_kv`` key for it in the same transaction;
- count the history's epochs in ``history_erased_transact`` (the agent's ``kv``, committed
  with the compaction) and open the new history's ``history_kv`` with an ``opened`` key;
- inject a notice from ``before_turn`` with an idempotent id (``InjectAction``): in half the
  seeds one per turn (under the turn's id: a turn's own notice must ask for no further
  turn), in the others one per consumed message (every turn after it asks again, a no-op by
  its id);
- ask for a compaction in ``prepare_inference`` once the last measurement passes a seeded
  threshold.

The world's transactional tool also writes its call into its ``history_kv`` (joining the
transaction that claims its result).

A later process (a seeded one) upgrades the module: a second module (``extaux``) and one more
key of ``extmod`` join, as a new release would add them. Processes also run embedder
transactions (``system.transaction``): 1–3 sends to the agent plus a ``shared_kv`` write,
some raising after their sends to roll back. Each process but the last dies at a seeded
store operation (a third of them inside the open, where the migrations run); the last is
healthy. After every process the disk alone is judged (:mod:`.extension_checks`): ``E1``
migrations, ``E2`` notices, ``E3`` history KV, ``E4`` transactions, plus every check of the
shared :class:`~agentkeep.chaos.Checker` (the transactions' committed messages join the
campaign's offers, so each is answered exactly once and counted in the final answer).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from agentkeep.chaos import calibration
from agentkeep.chaos.batches import BatchingModel
from agentkeep.chaos.campaign_result import CampaignResult
from agentkeep.chaos.extension_checks import (
    MODULE,
    TX_STORE,
    ExtensionChecks,
    Transaction,
    inference_notice,
    inject_notice,
    message_notice,
)
from agentkeep.chaos.frame import Campaign, play
from agentkeep.chaos.process import Offer, ProcessHandle, ProcessReport
from agentkeep.chaos.tools import CallArgs, ledger_tools
from agentkeep.features import HookContext, InferenceBoundary, NotificationBoundary, TurnInfo
from agentkeep.loop.actions import Action, CompactAction, InjectAction
from agentkeep.messages import system, user
from agentkeep.modules import Module, ModuleContext, ModuleHooks
from agentkeep.persistence.faults import FaultPlan
from agentkeep.providers.catalog import Providers
from agentkeep.refs import AgentSystemRef
from agentkeep.system_transaction import SystemTransaction
from agentkeep.tools import Tool, ToolContext
from agentkeep.types import SystemMessage

AUX = "extaux"
# The store operations an open takes before it restores the agent (store and module
# migrations, recovery): a third of the crashes land here.
OPEN_WINDOW = 60


def _migration(module: str, key: str) -> Callable[[ModuleContext], None]:
    def migrate(ctx: ModuleContext) -> None:
        table = f"{module}_rows"
        ctx.db.execute(f"CREATE TABLE IF NOT EXISTS {table} (key TEXT NOT NULL, part TEXT)")
        ctx.db.execute(f"INSERT INTO {table} (key, part) VALUES (?, 'a')", (key,))
        ctx.shared_kv.write(f"migrated-{key}", key)
        ctx.db.execute(f"INSERT INTO {table} (key, part) VALUES (?, 'b')", (key,))

    return migrate


def migrations_of(generation: Literal[1, 2]) -> dict[str, tuple[str, ...]]:
    """The modules' keys in a release: the first has ``extmod`` m1, m2; the upgrade adds
    ``extmod`` m3 and the ``extaux`` module (a1, a2)."""
    if generation == 1:
        return {MODULE: ("m1", "m2")}
    return {MODULE: ("m1", "m2", "m3"), AUX: ("a1", "a2")}


class ExtensionHooks(ModuleHooks):
    """``extmod``'s hooks: notices at both boundaries, injected notices, history KV, and
    compaction at a seeded threshold (see the module docstring)."""

    def __init__(self, threshold: int | None, *, per_turn: bool = False) -> None:
        self.threshold = threshold
        self.per_turn = per_turn

    def system_notifications_transact(
        self, ctx: HookContext, boundary: NotificationBoundary
    ) -> Sequence[SystemMessage] | None:
        epoch = int(ctx.kv.read("epoch") or 0)
        if isinstance(boundary, InferenceBoundary):
            inference = boundary.inference_id or "none"
            ctx.history_kv.write(f"i-{inference}", epoch)
            return [system(inference_notice(inference, epoch))]
        message_id = boundary.accepted.id
        ctx.kv.write("last_message", message_id)
        ctx.history_kv.write(f"m-{message_id}", epoch)
        return [system(message_notice(message_id, epoch))]

    def history_erased_transact(self, ctx: HookContext) -> None:
        epoch = int(ctx.kv.read("epoch") or 0) + 1
        ctx.kv.write("epoch", epoch)
        ctx.history_kv.write("opened", epoch)

    def before_turn(self, ctx: HookContext, turn: TurnInfo) -> Sequence[Action] | None:
        # Per turn (a fresh notice every turn, under the turn's id: a turn's own notice
        # must ask for no further turn, or the agent never settles), or per consumed
        # message (every turn after it asks again: a no-op by its id).
        if self.per_turn:
            key = ctx.turn_id
        else:
            last = ctx.kv.read("last_message")
            key = None if last is None else str(last)
        if key is None:
            return None
        return [InjectAction(system(inject_notice(key)), id=f"inj-{key}")]

    def prepare_inference(self, ctx: HookContext) -> CompactAction | None:
        tokens = ctx.context_tokens
        if self.threshold is not None and tokens is not None and tokens >= self.threshold:
            return CompactAction()
        return None


def modules_of(
    generation: Literal[1, 2], threshold: int | None, *, per_turn: bool = False
) -> list[Module]:
    """The modules of a release (:func:`migrations_of`); ``extmod`` returns the hooks."""

    def start(ctx: ModuleContext, agents: AgentSystemRef) -> ExtensionHooks:
        return ExtensionHooks(threshold, per_turn=per_turn)

    modules = []
    for name, keys in migrations_of(generation).items():
        migrations = [(key, _migration(name, key)) for key in keys]
        entry = start if name == MODULE else None
        modules.append(Module(name, migrations=migrations, before_start=entry))
    return modules


def extension_tools() -> tuple[Tool[CallArgs, str], Tool[CallArgs, str]]:
    """The world's ledger tools; the fragile one (transactional) also writes its call into
    its ``history_kv``, in the transaction that claims its result."""
    durable, fragile = ledger_tools()
    execute = fragile.execute

    def writing(ctx: ToolContext, args: CallArgs) -> str:
        ctx.history_kv.write(f"c-{ctx.provider_call_id}", args.call)
        result: str = execute(ctx, args)
        return result

    return durable, dataclasses.replace(fragile, execute=writing)


def notice_reading_providers(seed: int) -> Providers:
    """The batching model reading past the hooks' notices (a user message behind its
    boundary's notices still gets its tool calls)."""
    providers = Providers()
    providers.add("local", BatchingModel(seed=seed, past_notices=True), kind="gym")
    return providers


class DeliberateRollbackError(RuntimeError):
    """Raised by a transaction's work on purpose, after its sends: it must leave nothing."""


@dataclass
class Embedder:
    """The embedder's transactions so far, and what their outcomes were."""

    transactions: list[Transaction] = field(default_factory=list)

    def run(self, c: Campaign, handle: ProcessHandle, count: int) -> None:
        """``count`` transactions in this process, each 1–3 sends and a ``shared_kv`` write;
        about a third raise after their sends. A committed one's messages join the offers."""
        world = c.world
        for _ in range(count):
            number = len(self.transactions)
            ids = tuple(f"tx{number}-{k}" for k in range(c.rng.randint(1, 3)))
            planned = Transaction(
                number=number, ids=ids, rollback=c.rng.random() < 0.35, process=world.generation
            )
            self.transactions.append(planned)
            if handle.crashed():
                planned.outcome = "not run"
                continue

            def work(t: SystemTransaction, planned: Transaction = planned) -> None:
                for message_id in planned.ids:
                    t.send(world.agent_id, user(f"{message_id} message"), id=message_id)
                t.shared_kv(TX_STORE).write(f"tx{planned.number}", list(planned.ids))
                if planned.rollback:
                    raise DeliberateRollbackError(planned.number)

            try:
                handle.system.transaction(work)
            except DeliberateRollbackError:
                planned.outcome = "rolled back"
            except Exception:
                planned.outcome = "unknown"  # the store died: the disk will tell
            else:
                planned.outcome = "committed"
                self.landed(c, planned, handle.report)

    def landed(self, c: Campaign, planned: Transaction, report: ProcessReport) -> None:
        """``planned`` committed: its messages are offers the campaign expects answered."""
        for message_id in planned.ids:
            c.world.offers.append(Offer(id=message_id, text=f"{message_id} message"))
            c.world._mark_accepted(message_id, report)

    def reconcile(self, c: Campaign, present: set[int], report: ProcessReport) -> None:
        """After a process: an ``unknown`` transaction whose write is durable committed."""
        for planned in self.transactions:
            if planned.outcome == "unknown" and planned.number in present:
                planned.outcome = "committed (outcome unknown)"
                self.landed(c, planned, report)


@dataclass
class Plan:
    """A seed's plan beyond the world's: when the module is upgraded, the compaction
    threshold, and what each process does."""

    processes: int
    upgrade_at: int
    threshold: int | None
    per_turn: bool = False  # inject per turn (else per consumed message)

    @classmethod
    def draw(cls, c: Campaign) -> Plan:
        """2–5 crashing processes; the upgrade at one of them (or at the healthy last);
        a compaction threshold of 80–260 measured tokens, or none in a quarter of seeds;
        injects per turn in half the seeds (drawn apart, so the rest of the plan stays)."""
        processes = c.rng.randint(2, 5)
        threshold = None if c.rng.random() < 0.25 else c.rng.randint(80, 260)
        upgrade_at = c.rng.randint(1, processes + 1)
        per_turn = random.Random(c.seed ^ 0x1A7EC7).random() < 0.5
        return cls(processes, upgrade_at, threshold, per_turn)


def _fault(c: Campaign) -> FaultPlan:
    """A crash: a third inside the open (migrations, recovery), else over the healthy run."""
    if c.rng.random() < 1 / 3:
        at = c.rng.randint(1, OPEN_WINDOW)
    else:
        at = calibration.fault_point(c.rng, "extensions")
    return FaultPlan(at=at, mode="crash")


WORLD: dict[str, object] = {"tools": extension_tools(), "providers": notice_reading_providers}


def extensions(seed: int, *, home: str | Path | None = None) -> CampaignResult:
    """Modules with migrations (one upgrade), notices at both boundaries, injected notices,
    ``prepare_inference`` compactions, history KV and embedder transactions, through 2–5
    crashing processes and a healthy last one: ``E1``–``E4`` after every process, and the
    shared checker's invariants (each message once, answered, nothing owed)."""
    counter = [0]
    checked: list[ExtensionChecks] = []  # the seed's checks, for their counts

    def body(c: Campaign) -> None:
        plan = Plan.draw(c)
        checks = ExtensionChecks(c.world, c.checker)
        checked.append(checks)
        embedder = Embedder()

        def settle(report: ProcessReport) -> None:
            # Before the shared checker: a transaction whose outcome the crash hid and
            # whose write is durable committed, so its messages are expected.
            embedder.reconcile(c, checks.transactions_present(), report)

        c.before_check = settle
        for n in range(plan.processes + 1):
            final = n == plan.processes
            generation: Literal[1, 2] = 2 if n + 1 >= plan.upgrade_at else 1
            release = modules_of(generation, plan.threshold, per_turn=plan.per_turn)
            c.world.set_system_option("modules", release)
            fresh = []
            for _ in range(c.rng.randint(0, 2) if not final else 1):
                fresh.append(Offer(id=f"e{counter[0]}", text=f"ext {counter[0]}", queue=c.queue()))
                counter[0] += 1
            transactions = c.rng.randint(0, 3)
            compact = c.rng.random() < 0.3

            def driver(
                handle: ProcessHandle, transactions: int = transactions, compact: bool = compact
            ) -> None:
                handle.offer_pending()
                embedder.run(c, handle, transactions)
                if compact:
                    handle.request_compaction()

            c.world.offer(*fresh)
            report = c.process(
                final=final,
                faults=None if final else _fault(c),
                driver=driver,
                start=final,
            )
            c.checker.violations += checks.after_process(
                report, migrations_of(generation), embedder.transactions, final=final
            )

    result = play("extensions", seed, body, world_options=WORLD, home=home)
    result.counts = dict(checked[0].counts) if checked else {}
    return result


__all__ = ["ExtensionHooks", "extensions", "migrations_of", "modules_of"]
