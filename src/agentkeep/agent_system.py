"""``AgentSystem``: a collection of durable agents over one store it owns exclusively.

The system supervises one actor per agent that has work; acceptance (``send``/``steer``) is a
transaction through the writer that never waits for the agent's loop, and only then tells the
agent's actor. ``open`` takes the store's lock, migrates, and resumes every agent that owes
work; ``close`` admits nothing new, lets admitted work finish, and releases the lock.

The class is assembled from mixins, one concern each: its reads (``_system_reads``), its
delivery (``_system_delivery``), how it stops (``_system_stopping``); ``open``'s argument
checks and turn recovery are ``_system_opening``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any

from agentkeep._admission import Admission
from agentkeep._agent_rows import AgentInfo, create_agent, list_agents, new_agent_row
from agentkeep._system_delivery import SystemDelivery
from agentkeep._system_opening import check_open_arguments, recover_turns_at_open
from agentkeep._system_stopping import SystemStopping
from agentkeep.actors.agent_actor import LoopOptions
from agentkeep.actors.agent_factory import AgentFactory
from agentkeep.actors.directory import KnownAgent
from agentkeep.actors.registry import AgentRegistry
from agentkeep.actors.status import AgentStatus
from agentkeep.actors.supervisor import Backoff, RestartIntensity
from agentkeep.actors.tree import start_system_tree
from agentkeep.agent import Agent
from agentkeep.config import AgentConfig
from agentkeep.drivers.host import (
    DEFAULT_CANCEL_GRACE_SECONDS,
    DEFAULT_TURN_TIMEOUT_SECONDS,
    DriverHost,
)
from agentkeep.drivers.types import Driver
from agentkeep.errors import UnknownAgentError
from agentkeep.fault_injection import FaultInjection
from agentkeep.features import Feature, FeatureSet
from agentkeep.loop.context import DEFAULT_HELD_BLOCK_SECONDS, RetryPolicy
from agentkeep.loop.events import ProviderRemoved, Start
from agentkeep.loop.plans import QueueMode
from agentkeep.persistence.store import Store
from agentkeep.providers.registry import Providers
from agentkeep.refs import make_system_ref
from agentkeep.registry import Registry
from agentkeep.server_tools import ServerTool
from agentkeep.sessions import Sessions
from agentkeep.sessions import setup as session_setup
from agentkeep.sessions import tables as session_tables
from agentkeep.tools import Tool
from agentkeep.types import Message, Settings
from agentkeep.types.ledger import DEFAULT_MAX_EVENT_BYTES, DEFAULT_MAX_INPUT_BYTES


class AgentSystem(SystemStopping, SystemDelivery):
    """Use :meth:`open`. A context manager: leaving the block closes the system."""

    def __init__(
        self,
        store: Store,
        *,
        providers: Providers,
        defaults: Settings,
        features: FeatureSet,
        tools: Sequence[Tool[Any, Any]],
        instructions: str,
        steering_mode: QueueMode,
        send_mode: QueueMode,
        idle_grace_seconds: float,
        intensity: RestartIntensity,
        backoff: Backoff,
        drivers: Sequence[Driver] = (),
        turn_timeout_seconds: float = DEFAULT_TURN_TIMEOUT_SECONDS,
        driver_cancel_grace_seconds: float = DEFAULT_CANCEL_GRACE_SECONDS,
        retry: RetryPolicy | None = None,
        server_tools: Sequence[ServerTool] = (),
        held_block_seconds: float = DEFAULT_HELD_BLOCK_SECONDS,
    ) -> None:
        self._store = store
        self._providers = providers
        self._defaults = defaults
        self._features = features
        self._tools = tuple(tools)
        self._factory = AgentFactory(
            store=store.handle,
            providers=providers,
            features=features,
            tools=tuple(tools),
            options=LoopOptions(
                defaults=defaults,
                steering_mode=steering_mode,
                send_mode=send_mode,
                instructions=instructions,
                publish=store.ledger.publish,
                retry=retry,
                server_tools=tuple(server_tools),
                held_block_seconds=held_block_seconds,
            ),
        )
        # Injected drivers (docs/drivers.md): their runners are the tree's third tier.
        self._drivers = DriverHost(
            store,
            drivers,
            turn_timeout_seconds=turn_timeout_seconds,
            cancel_grace_seconds=driver_cancel_grace_seconds,
            intensity=intensity,
            backoff=backoff,
        )
        # The barrier: operations admitted before close (or a delete) finish before it goes on.
        self._admission = Admission()
        self._failure: BaseException | None = None
        self._stopped = threading.Event()
        self._shut_down = threading.Event()  # set once the store is released, however
        self._agents = AgentRegistry(
            self._make_agent,
            idle_grace_seconds=idle_grace_seconds,
            intensity=intensity,
            backoff=backoff,
            owed=lambda: store.read(lambda tx: tx.facts.agents_owing_work()),
        )
        store.on_writer_failure = self._agents.writer_failed
        # A removed provider is disabled: its agents learn it at once (a retry_forever
        # backoff against it ends now). Unsubscribed when the system stops.
        self._providers_off = providers.on_remove(
            lambda provider_id: self._agents.tell_all(ProviderRemoved(provider_id=provider_id))
        )
        self._tree = start_system_tree(
            store,
            self._agents,
            intensity=intensity,
            backoff=backoff,
            on_give_up=self._gave_up,
            drivers=self._drivers.start_tier if drivers else None,
        )

    @classmethod
    def open(
        cls,
        path: str | Path | None = None,
        *,
        providers: Providers,
        provider: str | None = None,
        model: str | None = None,
        features: Sequence[Feature] = (),
        tools: Sequence[Tool[Any, Any]] = (),
        instructions: str = "",
        steering_mode: QueueMode = "one-at-a-time",
        send_mode: QueueMode = "one-at-a-time",
        idle_grace_seconds: float = 30.0,
        resume: bool = True,
        restart_intensity: RestartIntensity | None = None,
        restart_backoff: Backoff | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES,
        drivers: Sequence[Driver] = (),
        turn_timeout_seconds: float = DEFAULT_TURN_TIMEOUT_SECONDS,
        driver_cancel_grace_seconds: float = DEFAULT_CANCEL_GRACE_SECONDS,
        retry_forever: bool = False,
        retry_initial_seconds: float = 0.1,
        retry_max_seconds: float = 30.0,
        server_tools: Sequence[ServerTool] = (),
        held_block_seconds: float = DEFAULT_HELD_BLOCK_SECONDS,
        testing: FaultInjection | None = None,
    ) -> AgentSystem:
        """Open the store at ``path`` (exclusively), migrate it, and resume owed work.

        ``idle_grace_seconds``: how long an agent that owes nothing keeps its actor before it
        is passivated (its durable state is untouched; accepted work starts it again).
        ``resume=False`` opens without starting agents that owe work (admin tools that touch
        one agent); :meth:`start` resumes them later. ``restart_intensity`` /
        ``restart_backoff``: how often a crashing agent actor is restarted (default: at most 5
        restarts in 10 s, backoff from 50 ms) before the system gives up, stops cleanly (the
        durable state stays) and surfaces the error (:attr:`failure`). The same limits apply
        to the system supervisor, which restarts the store writer and the agent tier after it
        when the writer fails (``rest_for_one``, see ``agentkeep.actors.tree``).
        ``max_event_bytes``: the bound on one ledger event's encoded data (seed 002's
        ``maxEventBytes``): a message or metadata update whose event would exceed it is
        refused (``EventTooLargeError``) before anything is written. ``max_input_bytes``: the
        bound on one input message's encoded JSON (seed 002's ``maxInputBytes``), refused
        (``InputTooLargeError``) before anything is written.
        ``drivers``: injected drivers (:class:`agentkeep.Driver`), selected by a session's
        pinned ``driver.id`` (docs/drivers.md); ``turn_timeout_seconds`` bounds one of their
        turns (seed 002's ``turnTimeoutMs``), ``driver_cancel_grace_seconds`` how long a
        cancelled run may take to return before it is abandoned.
        ``retry_forever``: seed 001's ``retryForever`` (docs/decisions.md): provider errors,
        failed compactions and fatal run-stage failures (a refused or unknown commit, a failed
        load) are retried with bounded exponential backoff — ``retry_initial_seconds``,
        doubling, at most ``retry_max_seconds`` — instead of leaving a failure note and
        giving up after three failed turns (the default). The owed stage stays between
        attempts (committed tool effects are not replayed) and the turn stays ``running``;
        only abort, close and shutdown stop the retrying.
        ``server_tools``: provider-owned tools (:class:`agentkeep.ServerTool`), declared to
        the provider beside ``tools`` and never executed; each may hide its live events
        (``visible_to_user=False``) or its history (``persist_in_history=False``).
        ``held_block_seconds``: the bound on how long a finished block of a response may stay
        volatile (default 0.05): a block waits for the provider's next event to ride in the
        commit that event brings (a one-block reply is one commit), and is committed on its
        own if none comes within the bound (docs/lifecycle.md). 0 commits each block as it
        finishes.
        ``testing``: fault injection for the tests and chaos campaigns only
        (:class:`agentkeep.chaos.FaultInjection`); never set it in production.

        Raises:
            StoreLockedError: another owner holds the store.
            InvalidConfigError: a mode, provider, feature, tool or driver is invalid (naming
                it: a duplicate or reserved driver id, a bad timeout, a bad retry backoff).
            ToolDefinitionError: two tools share a name (in one namespace).
            ModelNotServedError: ``provider`` does not serve ``model``.
        """
        checked = check_open_arguments(
            providers=providers,
            provider=provider,
            model=model,
            features=features,
            tools=tools,
            steering_mode=steering_mode,
            send_mode=send_mode,
            drivers=drivers,
            turn_timeout_seconds=turn_timeout_seconds,
            driver_cancel_grace_seconds=driver_cancel_grace_seconds,
            retry_forever=retry_forever,
            retry_initial_seconds=retry_initial_seconds,
            retry_max_seconds=retry_max_seconds,
            server_tools=server_tools,
            held_block_seconds=held_block_seconds,
        )
        # The system supervisor starts (and restarts) the writer: see actors/tree.py.
        hooks = testing or FaultInjection()
        store = Store.open(
            path,
            faults=hooks.faults,
            vfs=hooks.vfs,
            start_writer=False,
            max_event_bytes=max_event_bytes,
            max_input_bytes=max_input_bytes,
        )
        try:
            system = cls(
                store,
                providers=providers,
                defaults=Settings(provider=provider, model=model),
                features=checked.features,
                tools=tools,
                instructions=instructions,
                steering_mode=steering_mode,
                send_mode=send_mode,
                idle_grace_seconds=idle_grace_seconds,
                intensity=restart_intensity
                or RestartIntensity(max_restarts=5, period_seconds=10.0),
                backoff=restart_backoff or Backoff(initial_seconds=0.05, max_seconds=2.0),
                drivers=checked.drivers,
                turn_timeout_seconds=checked.turn_timeout_seconds,
                driver_cancel_grace_seconds=checked.driver_cancel_grace_seconds,
                retry=checked.retry,
                server_tools=checked.server_tools,
                held_block_seconds=checked.held_block_seconds,
            )
        except BaseException:
            store.close()  # a system that never came to be must not keep the lock
            raise
        try:
            # Before any agent starts: turns the previous process left live (docs/turns.md).
            recover_turns_at_open(store)
            if resume:
                system.start()
        except BaseException:
            system.close()
            raise
        return system

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def home(self) -> Path:
        """The directory of the system's store."""
        return self._store.home

    @property
    def store(self) -> Store:
        """The underlying store: an inspection hook for tests and the chaos campaigns, not
        part of the stable API (use the agent methods to read durable state)."""
        return self._store

    @property
    def registry(self) -> Registry:
        """The versioned definitions (seed 002's agents) in this system's store."""
        check = partial(session_setup.check_written_model, providers=self._providers)
        return Registry(self._store.handle, admission=self._admission, check=check)

    @property
    def sessions(self) -> Sessions:
        """Sessions (seed 002's): agents started from a definition's revision and pinned to
        it, and every other agent (see ``docs/sessions.md``)."""
        return Sessions(
            self._store.handle,
            admission=self._admission,
            providers=self._providers,
            tools=self._tools,
            features=self._features,
            defaults=self._defaults,
            is_running=self._is_running,
            runtime=self,
            drivers=self._drivers.ids,
        )

    def _is_running(self, agent_id: str) -> bool:
        known = self._agents.known(agent_id)
        return known is not None and not known.status.idle

    def start(self, *agent_ids: str) -> list[str]:
        """Resume every agent that owes work, or — given ids — start exactly those agents:
        an explicit start continues whatever their durable state owes, including a question
        an abort left unanswered. Returns the ids started."""
        if agent_ids:
            for agent_id in agent_ids:
                self.resolve(agent_id)  # UnknownAgentError for an id never created
            started = list(agent_ids)
        else:
            started = self._read(lambda tx: tx.facts.agents_owing_work())
        for agent_id in started:
            self._agents.tell(agent_id, Start(explicit=bool(agent_ids)), counted=True)
        return started

    def cancel_driver_turn(self, session_id: str, turn_id: str) -> None:
        """Fire the cancel signal of an injected driver's running turn (``sessions.cancel``
        calls this once the turn's ``cancelling`` is durable)."""
        self._drivers.cancel(turn_id)

    def __enter__(self) -> AgentSystem:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- agents ----------------------------------------------------------------------------

    def create(
        self,
        config: AgentConfig | None = None,
        *,
        id: str | None = None,
        parent: str | None = None,
        initial_context: Sequence[Message] | None = None,
    ) -> Agent:
        """Create an agent (claiming its id atomically); its loop does not start."""
        with self._admission.operation():
            row = new_agent_row(config, self._features, id, parent)
            create_agent(self._store.handle, row, initial_context)
            return Agent(self, row.id)

    def resolve(self, agent_id: str) -> Agent:
        """The agent with this id (its loop is not started). Raises ``UnknownAgentError``."""
        if self._read(lambda tx: tx.agents.get(agent_id)) is None:
            raise UnknownAgentError(agent_id)
        return Agent(self, agent_id)

    def agents(self) -> list[AgentInfo]:
        """Every agent with its parent, metadata and whether it owes work."""
        return self._read(list_agents)

    def delete(self, agent_id: str, *, timeout_seconds: float | None = 30.0) -> None:
        """Close the agent (letting its work finish), release its id, keep what it wrote."""
        with self._admission.operation():
            self._delete(agent_id, timeout_seconds)

    def _delete(self, agent_id: str, timeout_seconds: float | None) -> None:
        # No new work while it drains (a steady sender cannot starve the delete), and the
        # deliveries admitted before it finish first (none can start an actor after removal).
        with self._admission.deleting(agent_id, timeout_seconds):
            self._agents.remove(agent_id, timeout_seconds=timeout_seconds)
            self._delete_row(agent_id)

    def _delete_row(self, agent_id: str) -> None:
        if not self._store.transact(lambda tx: tx.agents.delete(agent_id)):
            raise UnknownAgentError(agent_id)

    def _make_agent(
        self, agent_id: str, *, status: AgentStatus, on_stopped: Callable[[str, bool], None]
    ) -> KnownAgent:
        """The registry's entry for ``agent_id`` (``AgentFactory.make`` with its row).

        Raises:
            UnknownAgentError: the agent was never created (or has been deleted).
        """
        row, pinned = self._store.read(
            lambda tx: (tx.agents.get(agent_id), session_tables.pinned_definition(tx, agent_id))
        )
        if row is None:
            raise UnknownAgentError(agent_id)
        # A session pinned to a revision runs with that revision's instructions and tools,
        # whatever its definition has become since (the revision is immutable).
        return self._factory.make(
            agent_id,
            config=row.config,
            system_ref=make_system_ref(self, agent_id),
            status=status,
            on_stopped=on_stopped,
            instructions=None if pinned is None else pinned.instructions,
            tool_ids=(
                None
                if pinned is None
                else session_setup.selection(pinned.toolbox.tool_ids, self._tools, self._features)
            ),
        )

    def wait_for_passivation(self, agent_id: str, *, timeout_seconds: float | None = None) -> bool:
        """Block until the agent has no actor (it settled and its grace period passed)."""
        return self._agents.wait_for_passivation(agent_id, timeout_seconds)

    def live_agents(self) -> list[str]:
        """Ids of agents that currently have an actor (not passivated)."""
        return self._agents.live()
