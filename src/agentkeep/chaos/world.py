"""The world a chaos campaign runs in: a disk that outlives each simulated process.

A :class:`ChaosWorld` owns a state directory (the disk), a ``generation`` counter (one per
simulated process), the side-effect :class:`~agentkeep.chaos.tools.Ledger`, one seeded
``random.Random`` and the messages the campaign wants delivered. :meth:`ChaosWorld.run_process`
plays one process: open an :class:`~agentkeep.AgentSystem` on the disk (optionally with a
:class:`~agentkeep.persistence.faults.FaultPlan` so the store dies or hiccups at a chosen
operation), offer every message not yet durably accepted (with fixed ids, so a re-offer is
idempotent), optionally abort after N stream events or request a compaction, wait for idle and
close. The store "dies" in ``crash`` mode: every later operation fails and the process's tools
refuse to run, exactly as if it had been killed; the next process reopens the same file.

The default model answers with batches of 1–3 calls, and the calls finish in a seeded order
(:mod:`agentkeep.chaos.batches`): a later call of a batch often finishes first, so the
checker can see whether results still land in call order (invariant I14).

The world reads nothing but durable state (:meth:`ChaosWorld.durable`) and the ledger; the
invariant checker (:mod:`agentkeep.chaos.checker`) judges the two.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from agentkeep.agent_system import AgentSystem
from agentkeep.chaos.batches import BatchingModel, CompletionOrder
from agentkeep.chaos.ledger_reads import read_all
from agentkeep.chaos.process import (
    DurableState,
    Live,
    Observer,
    Offer,
    ProcessHandle,
    ProcessReport,
    live_check,
    quietly,
    read_durable,
)
from agentkeep.chaos.tools import Ledger, guard_tool, ledger_tools
from agentkeep.errors import UnknownAgentError
from agentkeep.fault_injection import FaultInjection
from agentkeep.features import Feature
from agentkeep.loop.plans import QueueMode
from agentkeep.persistence.faults import FaultPlan
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.opening import open_store
from agentkeep.providers.catalog import Providers
from agentkeep.providers.responding import RespondingModel
from agentkeep.tools import Tool
from agentkeep.types import SessionEvent

if TYPE_CHECKING:
    from agentkeep import Agent

ProvidersFactory = Callable[[int], Providers]
Driver = Callable[["ProcessHandle"], None]


def default_providers(seed: int) -> Providers:
    """One ``local`` gym provider answering from the conversation (one call per batch)."""
    providers = Providers()
    providers.add("local", RespondingModel(seed=seed), kind="gym")
    return providers


def batching_providers(seed: int) -> Providers:
    """One ``local`` gym provider answering from the conversation with tool batches of 1–3
    calls (:class:`~agentkeep.chaos.batches.BatchingModel`): the world's default."""
    providers = Providers()
    providers.add("local", BatchingModel(seed=seed), kind="gym")
    return providers


class ChaosWorld:
    """A campaign's world. See the module docstring.

    Args:
        home: The state directory (the disk that outlives every process).
        seed: Seeds ``rng`` (the campaign's only source of randomness) and the models.
        agent_id: The agent every process drives.
        providers: ``seed -> Providers``, called once per process (a fresh process has fresh
            provider objects). Default: :func:`batching_providers`.
        provider, model: The system's default selection.
        tools: The tools, wrapped per process by :func:`~agentkeep.chaos.tools.guard_tool`.
            Default: the ledger's ``durable_tool`` and ``fragile_tool``.
        features: The user's features (the world adds its own observer after them).
        durable_tools, fragile_tools: Tool names the checker expects on even / odd calls.
        completion: Which call of a batch finishes after which (default: drawn from
            ``seed``); ``None`` lets the calls finish as their threads happen to.
        system_options: More keyword arguments for every ``AgentSystem.open`` (e.g.
            ``retry_forever=True`` with a short backoff).
        database: A ``postgresql://`` URL (with its ``schema``) the store lives in; None:
            SQLite, ``agents.db`` in ``home`` (see :mod:`agentkeep.chaos.backend`).
    """

    def __init__(
        self,
        home: str | Path,
        seed: int,
        *,
        agent_id: str = "chaosagent",
        providers: ProvidersFactory = batching_providers,
        provider: str = "local",
        model: str = "gym-1",
        tools: Sequence[Tool[Any, Any]] | None = None,
        features: Sequence[Feature] = (),
        steering_mode: QueueMode = "one-at-a-time",
        send_mode: QueueMode = "one-at-a-time",
        durable_tools: frozenset[str] = frozenset({"durable_tool"}),
        fragile_tools: frozenset[str] = frozenset({"fragile_tool"}),
        idle_timeout: float = 20.0,
        completion: CompletionOrder | Literal["seeded"] | None = "seeded",
        system_options: Mapping[str, Any] | None = None,
        database: str | None = None,
    ) -> None:
        self.home = Path(home)
        self.database = database
        self.seed = seed
        self.rng = random.Random(seed)
        self.agent_id = agent_id
        self.ledger = Ledger()
        self.generation = 0
        self.offers: list[Offer] = []
        self.accept_order: list[str] = []
        self.order_known = True
        self.reports: list[ProcessReport] = []
        self.durable_tools = durable_tools
        self.fragile_tools = fragile_tools
        self.idle_timeout = idle_timeout
        self.completion = (
            CompletionOrder(seed, dispatched=self.dispatched_calls)
            if completion == "seeded"
            else completion
        )
        self._providers = providers
        self._provider = provider
        self._model = model
        self._tools = tuple(tools) if tools is not None else ledger_tools()
        self._features = tuple(features)
        self._modes: tuple[QueueMode, QueueMode] = (steering_mode, send_mode)
        self._lock = threading.Lock()
        self._live: Live | None = None
        self._models: list[RespondingModel] = []  # the running process's, to read its requests
        self._system_options = dict(system_options or {})

    # -- liveness ----------------------------------------------------------------------------

    def alive(self, generation: int) -> bool:
        """Whether process ``generation`` is still alive (not closed, store not crashed)."""
        live = self._live
        if live is None or live.generation != generation:
            return False
        return not live.crashed()

    def dispatched_calls(self, agent_id: str) -> frozenset[str] | None:
        """The provider call ids of ``agent_id``'s pending calls, read through the running
        process's store; None if no process runs or its store cannot answer."""
        live = self._live
        system = live.system if live is not None else None
        if system is None:
            return None
        try:
            pending = system.internals.store.read(lambda tx: tx.calls.pending(agent_id))
        except Exception:  # a dead store: its calls' order no longer matters
            return None
        return frozenset(p.call.call_id for p in pending)

    def set_system_option(self, name: str, value: Any) -> None:
        """Open every later process with ``name=value`` (e.g. the ``modules`` of a new
        release: a campaign upgrading its extensions between processes)."""
        self._system_options[name] = value

    # -- processes ---------------------------------------------------------------------------

    def create_agent(self) -> None:
        """Create the agent in a healthy process of its own (idempotent)."""
        system = self._open(None, generation=0)
        try:
            try:
                system.resolve(self.agent_id)
            except UnknownAgentError:
                system.create(id=self.agent_id)
        finally:
            system.close(timeout_seconds=self.idle_timeout)

    def offer(self, *offers: Offer) -> None:
        """Add messages the campaign wants delivered (offered by the next process)."""
        self.offers.extend(offers)

    def run_process(
        self,
        *,
        faults: FaultPlan | None = None,
        messages: Sequence[Offer] = (),
        compact: Literal["no", "after_offers", "when_idle"] = "no",
        abort_after_events: int | None = None,
        driver: Driver | None = None,
        start: bool = False,
        before_close: Callable[[AgentSystem], None] | None = None,
    ) -> ProcessReport:
        """Play one process (see the module docstring) and return its report. ``before_close``
        runs on the idle system just before it closes (unless the store died)."""
        self.offers.extend(messages)
        self.generation += 1
        report = ProcessReport(generation=self.generation, faults=faults)
        live = Live(self, report, faults, abort_after_events)
        self._live = live
        system: AgentSystem | None = None
        try:
            system = self._open(faults, generation=self.generation, live=live)
            live.attach(system)
            agent = system.resolve(self.agent_id)
            handle = ProcessHandle(self, system, agent, live)
            handle.discover()
            if driver is not None:
                driver(handle)
            else:
                handle.offer_pending()
            if start:
                quietly(system.start)
            if compact == "after_offers":
                handle.request_compaction()
            report.idle = self._wait_for_idle(agent, live)
            if compact == "when_idle" and not live.crashed():
                handle.request_compaction()
                report.idle = agent.wait_for_idle(timeout_seconds=self.idle_timeout) and (
                    report.idle
                )
            if before_close is not None and not live.crashed():
                before_close(system)
        except Exception:
            # Only a dead store may make a process fail like this; a crash plan may also
            # kill the open itself (a module migration, the recovery).
            died_opening = system is None and faults is not None and faults.mode == "crash"
            if not (live.crashed() or died_opening):
                raise
            report.crashed = True
        finally:
            report.crashed = report.crashed or live.crashed()
            if system is not None:
                quietly(lambda: system.close(timeout_seconds=self.idle_timeout))
                report.operations = _operations(system)
            live.attach_failed()
            self._live = None
            for model in self._models:  # C1: no request ends with the model's own message
                report.live_violations += [
                    ("C1", f"request {n} ended with the model's own message (a prefill)")
                    for n in model.prefills
                ]
            self._models = []
        self.reports.append(report)
        return report

    def durable(self) -> DurableState:
        """The agent's durable state, read through a fresh open of the disk (no process may
        be running)."""
        with open_store(self.home, database=self.database) as store:
            return store.read(lambda tx: read_durable(tx, self.agent_id))

    def durable_with_events(self) -> tuple[DurableState, list[SessionEvent]]:
        """The agent's durable state and its whole event ledger, read in one snapshot through
        a fresh open of the disk (no process may be running)."""
        agent_id = self.agent_id

        def read(tx: Transaction) -> tuple[DurableState, list[SessionEvent]]:
            return read_durable(tx, agent_id), read_all(
                lambda after: tx.ledger.events(agent_id, after, 1000)
            )

        with open_store(self.home, database=self.database) as store:
            return store.read(read)

    # -- internals ---------------------------------------------------------------------------

    def _open(
        self, faults: FaultPlan | None, *, generation: int, live: Live | None = None
    ) -> AgentSystem:
        tools = [
            guard_tool(t, self.ledger, generation, live_check(self, generation), self.completion)
            for t in self._tools
        ]
        features: list[Feature] = list(self._features)
        if live is not None:
            features.append(Observer(live))
        providers = self._providers(self.seed)
        models = (providers.get(name) for name in providers.ids())
        self._models = [m for m in models if isinstance(m, RespondingModel)]
        return AgentSystem.open(
            self.home,
            providers=providers,
            provider=self._provider,
            model=self._model,
            tools=tools,
            features=features,
            steering_mode=self._modes[0],
            send_mode=self._modes[1],
            testing=FaultInjection(faults=faults),
            database=self.database,
            **self._system_options,
        )

    def _wait_for_idle(self, agent: Agent, live: Live) -> bool:
        """Wait for the agent to be idle. Retrying forever, a dead store is retried until
        the close: the wait also ends (not idle) once the process's store died."""
        if not self._system_options.get("retry_forever"):
            return agent.wait_for_idle(timeout_seconds=self.idle_timeout)
        deadline = time.monotonic() + self.idle_timeout
        while not live.crashed() and time.monotonic() < deadline:
            if agent.wait_for_idle(timeout_seconds=0.02):
                return True
        return False

    def _mark_accepted(self, offer_id: str, report: ProcessReport) -> None:
        with self._lock:
            if offer_id in self.accept_order:
                return
            self.accept_order.append(offer_id)
            report.accepted.append(offer_id)


def _operations(system: AgentSystem) -> int:
    """The store operations the process's writer counted (its fault points' clock); the
    counter outlives the close, and a store that failed to open counted none."""
    try:
        return system.internals.store.statistics().operations
    except Exception:
        return 0


__all__ = [
    "ChaosWorld",
    "Driver",
    "DurableState",
    "Offer",
    "ProcessHandle",
    "ProcessReport",
    "ProvidersFactory",
    "batching_providers",
    "default_providers",
    "read_durable",
]
