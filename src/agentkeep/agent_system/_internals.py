"""The system's internals: its parts, built once by ``AgentSystem.open``, and the plumbing
the tests, the chaos campaigns and the daemon's tooling reach through the documented
accessor ``AgentSystem.internals`` (none of it is public API).

The parts, each owning one concern: :class:`~agentkeep.agent_system._reads.Reads`,
:class:`~agentkeep.agent_system._acceptance.Acceptance` (the one acceptance path),
:class:`~agentkeep.agent_system._requests.Requests` (abort, compact, wait, wake),
:class:`~agentkeep.agent_system._transactions.Transactions` (an embedder's transaction) and
:class:`~agentkeep.agent_system._stopping.Stopping`; the actors' registry and the drivers'
host are the runtime they share.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Unpack

from agentkeep._admission import Admission
from agentkeep.actors.agent_actor import LoopOptions
from agentkeep.actors.agent_factory import AgentFactory
from agentkeep.actors.agent_tier import AgentTier
from agentkeep.actors.directory import KnownAgent
from agentkeep.actors.status import AgentStatus
from agentkeep.actors.tree import start_system_tree
from agentkeep.agent_system._acceptance import Acceptance, AcceptOptions
from agentkeep.agent_system._metrics import SystemCollector
from agentkeep.agent_system._opening import OpenArguments
from agentkeep.agent_system._ownership import Ownership
from agentkeep.agent_system._reads import Reads
from agentkeep.agent_system._requests import Requests
from agentkeep.agent_system._stopping import Stopping
from agentkeep.agent_system._transactions import Transactions
from agentkeep.agent_system.surfaces import SurfaceReader
from agentkeep.delivery import Delivery
from agentkeep.drivers.host import DriverHost
from agentkeep.errors import UnknownAgentError
from agentkeep.loop.events import ProviderRemoved
from agentkeep.metrics import RuntimeMetrics
from agentkeep.modules._runtime import ModuleRuntime
from agentkeep.persistence.store import Store
from agentkeep.providers.catalog import Providers
from agentkeep.refs import SystemPort, make_system_ref
from agentkeep.sessions import setup as session_setup
from agentkeep.sessions import tables as session_tables
from agentkeep.types import QueueableMessage
from agentkeep.types.records import QueueName


class SystemInternals:
    """One system's parts and plumbing (see the module docstring).

    Built by :meth:`build`; the facade attaches itself (:attr:`port`) before any agent is
    made, since the references handed to tools and hooks see the system through it.
    """

    def __init__(self, store: Store, providers: Providers, args: OpenArguments) -> None:
        self.store = store
        self.providers = providers
        self.args = args
        self.defaults = args.defaults
        self.features = args.features
        self.tools = tuple(args.tools)
        self.port: SystemPort | None = None
        #: What this system may write: the whole store, or one partition of it.
        self.ownership = Ownership(store.partition, store.partition_count)
        #: What the daemon's surfaces read beside the facade (``agent_system.surfaces``).
        self.surfaces = SurfaceReader(store)
        #: The modules: run at open by the facade; their hooks join ``features`` then.
        self.modules = ModuleRuntime(store.handle, args.modules, args.features)
        #: The system's own metrics registry (counters fed by the loops; state when scraped).
        self.metrics = RuntimeMetrics()
        self.factory = AgentFactory(
            store=store.handle,
            providers=providers,
            features=args.features,
            modules=self.modules,
            tools=self.tools,
            options=LoopOptions(
                defaults=args.defaults,
                steering_mode=args.steering_mode,
                send_mode=args.send_mode,
                instructions=args.instructions,
                publish=store.ledger.publish,
                retry=args.retry,
                provider_tools=args.provider_tools,
                held_block_seconds=args.held_block_seconds,
                credentials=args.credentials,
                metrics=self.metrics,
            ),
        )
        # Injected drivers (docs/drivers.md): their runners are the tree's third tier.
        self.drivers = DriverHost(
            store,
            args.drivers,
            turn_timeout_seconds=args.turn_timeout_seconds,
            cancel_grace_seconds=args.driver_cancel_grace_seconds,
            intensity=args.intensity,
            backoff=args.backoff,
            credentials=args.credentials,
        )
        # The barrier: operations admitted before close (or a delete) finish before it goes on.
        self.admission = Admission()
        self.agents = AgentTier(
            self.make_agent,
            idle_grace_seconds=args.idle_grace_seconds,
            intensity=args.intensity,
            backoff=args.backoff,
            owed=self.owed,
        )
        store.on_writer_failure = self.agents.writer_failed
        self.metrics.registry.register(SystemCollector(store, self.agents))
        self.reads = Reads(
            store,
            admission=self.admission,
            agents=self.agents,
            features=args.features,
            defaults=args.defaults,
        )
        self.acceptance = Acceptance(
            store,
            admission=self.admission,
            agents=self.agents,
            drivers=self.drivers,
            providers=providers,
            defaults=args.defaults,
            ownership=self.ownership,
        )
        self.requests = Requests(
            store,
            admission=self.admission,
            agents=self.agents,
            reads=self.reads,
            ownership=self.ownership,
        )
        self.transactions = Transactions(
            store,
            admission=self.admission,
            acceptance=self.acceptance,
            agents=self.agents,
            drivers=self.drivers,
        )
        # A removed provider is disabled: its agents learn it at once (a retry_forever
        # backoff against it ends now). Unsubscribed when the system stops.
        providers_off = providers.on_remove(
            lambda provider_id: self.agents.tell_all(ProviderRemoved(provider_id=provider_id))
        )
        self.stopping = Stopping(
            store,
            admission=self.admission,
            agents=self.agents,
            drivers=self.drivers,
            providers_off=providers_off,
        )

    def start_tree(self) -> None:
        """Start the system's supervision tree (the writer, the agents, the drivers)."""
        self.stopping.run(
            start_system_tree(
                self.store,
                self.agents,
                intensity=self.args.intensity,
                backoff=self.args.backoff,
                on_give_up=self.stopping.gave_up,
                drivers=self.drivers.start_tier if self.args.drivers else None,
            )
        )

    def owed(self) -> list[str]:
        """The agents that owe work, of this system's partition (a snapshot read)."""
        index = self.ownership.index
        return self.store.read(lambda tx: tx.facts.agents_owing_work(index))

    # -- plumbing (tests, chaos campaigns, the CLI's demo) ------------------------------------

    def accept(
        self,
        agent_id: str,
        queue: QueueName,
        message: QueueableMessage,
        **how: Unpack[AcceptOptions],
    ) -> Delivery:
        """Queue a message durably and wake the agent (:meth:`Acceptance.accept`)."""
        return self.acceptance.accept(agent_id, queue, message, **how)

    def wake(self, agent_id: str) -> None:
        """Let the agent continue what its durable state owes (:meth:`Requests.wake`)."""
        self.requests.wake(agent_id)

    def live_agents(self) -> list[str]:
        """Ids of agents that currently have an actor (not passivated)."""
        return self.agents.live()

    def wait_for_passivation(self, agent_id: str, *, timeout_seconds: float | None = None) -> bool:
        """Block until the agent has no actor (it settled and its grace period passed)."""
        return self.agents.wait_for_passivation(agent_id, timeout_seconds)

    def is_running(self, agent_id: str) -> bool:
        """Whether the agent's actor runs work now."""
        known = self.agents.known(agent_id)
        return known is not None and not known.status.idle

    def make_agent(
        self, agent_id: str, *, status: AgentStatus, on_stopped: Callable[[str, bool], None]
    ) -> KnownAgent:
        """The registry's entry for ``agent_id`` (``AgentFactory.make`` with its row).

        Raises:
            UnknownAgentError: the agent was never created (or has been deleted).
        """
        assert self.port is not None, "the facade attaches itself before any agent starts"
        self.ownership.check(agent_id)  # never an actor for another partition's agent
        row, pinned = self.store.read(
            lambda tx: (tx.agents.get(agent_id), session_tables.pinned_definition(tx, agent_id))
        )
        if row is None:
            raise UnknownAgentError(agent_id)
        # A session pinned to a revision runs with that revision's instructions and tools,
        # whatever its definition has become since (the revision is immutable).
        return self.factory.make(
            agent_id,
            config=row.config,
            system_ref=make_system_ref(self.port, self.acceptance, agent_id),
            status=status,
            on_stopped=on_stopped,
            instructions=None if pinned is None else pinned.instructions,
            tool_ids=(
                None
                if pinned is None
                else session_setup.selection(pinned.toolbox.tool_ids, self.tools, self.features)
            ),
            definition=pinned,
        )
