"""``AgentSystem``: a collection of durable agents over one store it owns exclusively.

The system supervises one actor per agent that has work; acceptance (``send``/``steer``) is a
transaction through the writer that never waits for the agent's loop, and only then tells the
agent's actor. ``open`` takes the store's lock, migrates, and resumes every agent that owes
work; ``close`` admits nothing new, lets admitted work finish, and releases the lock.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from types import TracebackType
from typing import Any

import msgspec
import pykka
import structlog

from agentkeep.actors.agent_actor import AgentActor
from agentkeep.actors.services import AgentServices, current_loop_agent
from agentkeep.config import AgentConfig
from agentkeep.delivery import Delivery, accept_message, check_message_id, validate_message
from agentkeep.errors import (
    AgentClosedError,
    AgentExistsError,
    AwaitFromOwnLoopError,
    InvalidConfigError,
    UnknownAgentError,
)
from agentkeep.features import Feature, FeatureSet
from agentkeep.ids import is_valid_id, new_id
from agentkeep.loop.messages import (
    AbortRequested,
    CompactRequested,
    QueueMode,
    ShutdownRequested,
    Start,
    WorkAccepted,
)
from agentkeep.persistence.faults import FaultPlan
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.records import (
    AgentRow,
    CompactionRecord,
    JSONObject,
    MessageOptions,
    PermissionMode,
    QueueName,
    Settings,
    rebuild_messages,
)
from agentkeep.persistence.store import Store
from agentkeep.providers.registry import Providers
from agentkeep.providers.types import Message, QueueableMessage, ReasoningEffort, ServiceTier
from agentkeep.refs import make_system_ref
from agentkeep.tools import Tool

log = structlog.get_logger(__name__)

_MODES = ("one-at-a-time", "all")


class AgentInfo(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    parent_id: str | None
    metadata: JSONObject
    owes_work: bool


class AgentSystem:
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
    ) -> None:
        self._store = store
        self._providers = providers
        self._defaults = defaults
        self._features = features
        self._tools = tuple(tools)
        self._instructions = instructions
        self._modes = (steering_mode, send_mode)
        self._lock = threading.RLock()
        self._actors: dict[str, pykka.ActorRef[Any]] = {}
        self._services: dict[str, AgentServices] = {}
        self._closing = False
        # Admission barrier: operations admitted before close finish before it goes on.
        self._admitted = 0
        self._admission = threading.Condition(self._lock)
        # Passivation: an agent that owes nothing loses its actor after this grace period.
        self._idle_grace_seconds = idle_grace_seconds
        self._passivation: dict[str, threading.Timer] = {}

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
        faults: FaultPlan | None = None,
        vfs: str | None = None,
        idle_grace_seconds: float = 30.0,
        resume: bool = True,
    ) -> AgentSystem:
        """Open the store at ``path`` (exclusively), migrate it, and resume owed work.

        ``idle_grace_seconds``: how long an agent that owes nothing keeps its actor before it
        is passivated (its durable state is untouched; accepted work starts it again).
        ``resume=False`` opens without starting agents that owe work (admin tools that touch
        one agent); :meth:`start` resumes them later.

        Raises:
            StoreLockedError: another owner holds the store.
            InvalidConfigError: a mode, provider or feature set is invalid.
        """
        for name, mode in (("steering_mode", steering_mode), ("send_mode", send_mode)):
            if mode not in _MODES:
                raise InvalidConfigError(f"{name} must be one of {_MODES}, got {mode!r}")
        if provider is not None and providers.get(provider) is None:
            raise InvalidConfigError(f'Provider "{provider}" is not registered.')
        feature_set = FeatureSet(features)
        store = Store.open(path, faults=faults, vfs=vfs)
        system = cls(
            store,
            providers=providers,
            defaults=Settings(provider=provider, model=model),
            features=feature_set,
            tools=tools,
            instructions=instructions,
            steering_mode=steering_mode,
            send_mode=send_mode,
            idle_grace_seconds=idle_grace_seconds,
        )
        try:
            if resume:
                system.start()
        except BaseException:
            system.close()
            raise
        return system

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def home(self) -> Path:
        return self._store.home

    @property
    def store(self) -> Store:
        return self._store

    def start(self) -> list[str]:
        """Resume every agent that owes work; returns their ids."""
        owing = self._store.read(lambda tx: tx.agents_owing_work())
        for agent_id in owing:
            self._tell(agent_id, Start(), counted=True)
        return owing

    def close(self, *, timeout_seconds: float | None = 30.0) -> None:
        """Admit nothing new, let admitted work finish (up to the timeout), stop every actor
        (destroying sessions once), and release the store's lock.

        Raises:
            AgentClosedError: called from inside an agent's own loop (a hook or a tool): that
                would wait for a turn that cannot finish. The close then goes on in the
                background.
        """
        inside = current_loop_agent()
        if inside is not None:
            threading.Thread(target=self.close, name="agentkeep-close", daemon=True).start()
            raise AgentClosedError(
                f'Closing the system from inside agent "{inside}"\'s loop would wait for a turn '
                "that cannot finish; the system is closing in the background."
            )
        with self._lock:
            if self._closing:
                return
            self._closing = True
            deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
            # Everything admitted before the barrier is written (and told) before we go on.
            self._admission.wait_for(
                lambda: self._admitted == 0,
                None if deadline is None else max(0.0, deadline - time.monotonic()),
            )
            services = list(self._services.values())
        for each in services:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not each.status.wait_for_idle(remaining):
                log.warning("agent_close_timed_out", agent_id=each.agent_id)
        self._stop_actors()
        self._store.close()

    def shutdown(self) -> None:
        """Graceful shutdown: refuse new work, let in-flight inferences and tool calls finish
        and commit, stop before the next step; owed work resumes at the next open."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            self._admission.wait_for(lambda: self._admitted == 0, 30.0)
            actors = list(self._actors.values())
        for ref in actors:
            ref.tell(ShutdownRequested())
        for each in list(self._services.values()):
            each.status.wait_for_idle(30.0)
        self._stop_actors()
        self._store.close()

    def install_signal_handlers(self) -> None:
        """For a daemon: SIGTERM and SIGINT start a graceful :meth:`shutdown` (call from the
        main thread). :meth:`wait_for_shutdown` blocks until it has finished."""
        self._shut_down = threading.Event()

        def handle(signum: int, frame: object) -> None:
            log.info("shutdown_signal", signal=signal.Signals(signum).name)
            threading.Thread(target=self._shutdown_and_flag, name="agentkeep-shutdown").start()

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)

    def _shutdown_and_flag(self) -> None:
        try:
            self.shutdown()
        finally:
            self._shut_down.set()

    def wait_for_shutdown(self, timeout_seconds: float | None = None) -> bool:
        """Block until a signal-driven shutdown has finished (see install_signal_handlers)."""
        return self._shut_down.wait(timeout_seconds)

    def _stop_actors(self) -> None:
        with self._lock:
            actors = list(self._actors.values())
            self._actors.clear()
            for timer in self._passivation.values():
                timer.cancel()
            self._passivation.clear()
        for ref in actors:
            try:
                ref.stop(block=True, timeout=10)
            except pykka.ActorDeadError:
                pass
            except pykka.Timeout:
                log.warning("agent_stop_timed_out")

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
        with self._operation():
            return self._create(config, id, parent, initial_context)

    def _create(
        self,
        config: AgentConfig | None,
        id: str | None,
        parent: str | None,
        initial_context: Sequence[Message] | None,
    ) -> Agent:
        checked = (config or AgentConfig()).validated()
        for name, settings in checked.features.items():
            feature = self._features.get(name)
            if feature is None:
                raise InvalidConfigError(f'config names feature "{name}", which this system lacks')
            feature.validate_settings(settings)
        agent_id = id if id is not None else new_id()
        if not is_valid_id(agent_id):
            raise InvalidConfigError(
                f"agent id {agent_id!r} is invalid: use 2-32 lowercase letters and digits"
            )
        row = AgentRow(
            id=agent_id,
            config=msgspec.to_builtins(checked),
            metadata=dict(checked.metadata),
            parent_id=parent,
            created_at_ms=int(time.time() * 1000),
        )

        def work(tx: Transaction) -> None:
            if parent is not None and tx.get_agent(parent) is None:
                raise UnknownAgentError(parent)
            if not tx.create_agent(row):
                raise AgentExistsError(agent_id)
            if initial_context:
                tx.append_record(agent_id, CompactionRecord(messages=tuple(initial_context)))

        self._store.transact(work)
        return Agent(self, agent_id)

    def resolve(self, agent_id: str) -> Agent:
        """The agent with this id (its loop is not started). Raises ``UnknownAgentError``."""
        if self._store.read(lambda tx: tx.get_agent(agent_id)) is None:
            raise UnknownAgentError(agent_id)
        return Agent(self, agent_id)

    def agents(self) -> list[AgentInfo]:
        def work(tx: Transaction) -> list[AgentInfo]:
            owing = set(tx.agents_owing_work())
            return [
                AgentInfo(
                    id=r.id, parent_id=r.parent_id, metadata=r.metadata, owes_work=r.id in owing
                )
                for r in tx.list_agents()
            ]

        return self._store.read(work)

    def delete(self, agent_id: str, *, timeout_seconds: float | None = 30.0) -> None:
        """Close the agent (letting its work finish), release its id, keep what it wrote."""
        with self._operation():
            self._delete(agent_id, timeout_seconds)

    def _delete(self, agent_id: str, timeout_seconds: float | None) -> None:
        with self._lock:
            services = self._services.get(agent_id)
        if services is not None:
            services.status.wait_for_idle(timeout_seconds)
        with self._lock:
            ref = self._actors.pop(agent_id, None)
            self._services.pop(agent_id, None)
        if ref is not None:
            ref.stop(block=True, timeout=10)
        self._cancel_passivation(agent_id)
        if not self._store.transact(lambda tx: tx.delete_agent(agent_id)):
            raise UnknownAgentError(agent_id)

    # -- delivery --------------------------------------------------------------------------

    def deliver(
        self,
        agent_id: str,
        queue: QueueName,
        message: QueueableMessage,
        *,
        id: str | None = None,
        metadata: JSONObject | None = None,
        options: MessageOptions | None = None,
        start: bool = True,
    ) -> Delivery:
        """Queue a message durably and wake the agent; returns once it is durable.

        ``start=False`` only queues it (the owed fact is written, so the next ``open`` or
        ``start`` resumes it) without starting the agent now.
        """
        with self._operation():
            return self._deliver(agent_id, queue, message, id, metadata, options, start)

    def _deliver(
        self,
        agent_id: str,
        queue: QueueName,
        message: QueueableMessage,
        id: str | None,
        metadata: JSONObject | None,
        options: MessageOptions | None,
        start: bool,
    ) -> Delivery:
        checked = validate_message(message)
        message_id = check_message_id(id)
        opts = options or MessageOptions()
        if opts.provider is not None and self._providers.get(opts.provider) is None:
            raise InvalidConfigError(f'Provider "{opts.provider}" is not registered.')
        delivery, queued = self._store.transact(
            lambda tx: accept_message(
                tx,
                agent_id,
                queue=queue,
                message=checked,
                message_id=message_id,
                options=opts,
                metadata=metadata,
            )
        )
        if queued is not None and start:
            self._tell(agent_id, WorkAccepted(message=queued), counted=True)
        return delivery

    def abort(
        self, agent_id: str, *, wait: bool = False, timeout_seconds: float | None = None
    ) -> None:
        self._refuse_own_wait(agent_id, wait)
        with self._lock:
            ref = self._actors.get(agent_id)
            services = self._services.get(agent_id)
        if ref is None or services is None:
            return  # an agent with no actor has no turn to abort
        ref.tell(AbortRequested())
        if wait:
            services.status.wait_for_idle(timeout_seconds)

    def compact(
        self, agent_id: str, *, wait: bool = False, timeout_seconds: float | None = None
    ) -> None:
        self._refuse_own_wait(agent_id, wait)
        with self._operation():
            services = self._services_for(agent_id)
            future = services.status.add_compaction_waiter()
            self._tell(agent_id, CompactRequested(), counted=True)
        if wait:
            future.result(timeout_seconds)

    def wait_for_idle(self, agent_id: str, *, timeout_seconds: float | None = None) -> bool:
        self._refuse_own_wait(agent_id, True)
        with self._lock:
            services = self._services.get(agent_id)
        return True if services is None else services.status.wait_for_idle(timeout_seconds)

    # -- reads -----------------------------------------------------------------------------

    def transcript(self, agent_id: str) -> list[Message]:
        return rebuild_messages(self._store.read(lambda tx: tx.load_records(agent_id)))

    def settings(self, agent_id: str) -> Settings:
        return self._store.read(lambda tx: tx.read_settings(agent_id)) or self._defaults

    def context_tokens(self, agent_id: str) -> int | None:
        return self._store.read(lambda tx: tx.read_context_tokens(agent_id))

    def state(self, agent_id: str) -> str:
        with self._lock:
            services = self._services.get(agent_id)
        if services is not None and not services.status.idle:
            return "running"
        owed = self._store.read(lambda tx: tx.read_owed(agent_id))
        return "idle" if owed is None else "owes_work"

    def metadata(self, agent_id: str) -> JSONObject:
        row = self._store.read(lambda tx: tx.get_agent(agent_id))
        if row is None:
            raise UnknownAgentError(agent_id)
        return dict(row.metadata)

    def update_metadata(self, agent_id: str, patch: JSONObject) -> JSONObject:
        """Shallow-merge ``patch`` into the agent's metadata; committed before it shows."""
        if not isinstance(patch, dict):
            raise InvalidConfigError("a metadata update must be a JSON object")
        with self._operation():

            def work(tx: Transaction) -> JSONObject:
                if tx.get_agent(agent_id) is None:
                    raise UnknownAgentError(agent_id)
                return tx.update_metadata(agent_id, patch)

            return self._store.transact(work)

    def parent_of(self, agent_id: str) -> str | None:
        row = self._store.read(lambda tx: tx.get_agent(agent_id))
        if row is None:
            raise UnknownAgentError(agent_id)
        return row.parent_id

    def children_of(self, agent_id: str) -> list[str]:
        return self._store.read(lambda tx: tx.children_of(agent_id))

    # -- internals -------------------------------------------------------------------------

    @contextmanager
    def _operation(self) -> Iterator[None]:
        """Admit one operation (refused once closing); close waits for admitted ones."""
        with self._lock:
            if self._closing:
                raise AgentClosedError("The agent system has been closed.")
            self._admitted += 1
        try:
            yield
        finally:
            with self._lock:
                self._admitted -= 1
                self._admission.notify_all()

    def _refuse_own_wait(self, agent_id: str, wait: bool) -> None:
        if wait and current_loop_agent() == agent_id:
            raise AwaitFromOwnLoopError(
                f'Waiting for agent "{agent_id}" from inside its own loop would wait for itself.'
            )

    def _services_for(self, agent_id: str) -> AgentServices:
        with self._lock:
            services = self._services.get(agent_id)
            if services is not None:
                return services
            row = self._store.read(lambda tx: tx.get_agent(agent_id))
            if row is None:
                raise UnknownAgentError(agent_id)
            services = AgentServices(
                agent_id=agent_id,
                store=self._store.handle,
                providers=self._providers,
                features=self._features,
                instructions=self._instructions,
                tools=self._tools,
                defaults=self._defaults,
                steering_mode=self._modes[0],
                send_mode=self._modes[1],
                config=row.config,
                system_ref=make_system_ref(self, agent_id),
                on_stopped=self._agent_stopped,
            )
            self._services[agent_id] = services
            return services

    def _tell(self, agent_id: str, event: Any, *, counted: bool) -> None:
        services = self._services_for(agent_id)
        with self._lock:
            self._cancel_passivation(agent_id)
            ref = self._actors.get(agent_id)
            if ref is None or not ref.is_alive():
                ref = AgentActor.start(services)
                self._actors[agent_id] = ref
            if counted:
                services.status.signal_sent()
            ref.tell(event)

    # -- passivation -------------------------------------------------------------------------

    def _agent_stopped(self, agent_id: str, settled: bool) -> None:
        """Called by an agent actor whose run stopped: passivate it after the grace period
        if it settled (an agent that still owes work keeps its actor)."""
        if not settled:
            return
        with self._lock:
            if self._closing or agent_id not in self._actors:
                return
            self._cancel_passivation(agent_id)
            timer = threading.Timer(self._idle_grace_seconds, self._passivate, (agent_id,))
            timer.daemon = True
            self._passivation[agent_id] = timer
            timer.start()

    def _cancel_passivation(self, agent_id: str) -> None:
        timer = self._passivation.pop(agent_id, None)
        if timer is not None:
            timer.cancel()

    def _passivate(self, agent_id: str) -> None:
        with self._lock:
            self._passivation.pop(agent_id, None)
            services = self._services.get(agent_id)
            if self._closing or services is None or not services.status.idle:
                return
            ref = self._actors.pop(agent_id, None)
            self._services.pop(agent_id, None)
        if ref is not None:
            with suppress(pykka.ActorDeadError):
                ref.stop(block=False)  # its session closes in on_stop; the store keeps the rest
            log.debug("agent_passivated", agent_id=agent_id)
        with self._lock:
            self._admission.notify_all()  # wakes wait_for_passivation

    def wait_for_passivation(self, agent_id: str, *, timeout_seconds: float | None = None) -> bool:
        """Block until the agent has no actor (it settled and its grace period passed)."""
        with self._lock:
            return self._admission.wait_for(lambda: agent_id not in self._actors, timeout_seconds)

    def live_agents(self) -> list[str]:
        """Ids of agents that currently have an actor (not passivated)."""
        with self._lock:
            return sorted(self._actors)


class Agent:
    """One agent of a system. Cheap to create; holds no state of its own."""

    def __init__(self, system: AgentSystem, agent_id: str) -> None:
        self._system = system
        self.id = agent_id

    def __repr__(self) -> str:
        return f"Agent(id={self.id!r})"

    def send(
        self,
        message: QueueableMessage,
        *,
        id: str | None = None,
        metadata: JSONObject | None = None,
        provider: str | None = None,
        model: str | None = None,
        effort: ReasoningEffort | None = None,
        service_tier: ServiceTier | None = None,
        permission_mode: PermissionMode | None = None,
    ) -> Delivery:
        """Queue a message on the send queue; returns once it is durable."""
        options = MessageOptions(
            provider=provider,
            model=model,
            effort=effort,
            service_tier=service_tier,
            permission_mode=permission_mode,
        )
        return self._system.deliver(
            self.id, "send", message, id=id, metadata=metadata, options=options
        )

    def steer(
        self,
        message: QueueableMessage,
        *,
        id: str | None = None,
        metadata: JSONObject | None = None,
        provider: str | None = None,
        model: str | None = None,
        effort: ReasoningEffort | None = None,
        service_tier: ServiceTier | None = None,
        permission_mode: PermissionMode | None = None,
    ) -> Delivery:
        """Queue a message on the steering queue; returns once it is durable."""
        options = MessageOptions(
            provider=provider,
            model=model,
            effort=effort,
            service_tier=service_tier,
            permission_mode=permission_mode,
        )
        return self._system.deliver(
            self.id, "steering", message, id=id, metadata=metadata, options=options
        )

    def abort(self, *, wait: bool = False, timeout_seconds: float | None = None) -> None:
        self._system.abort(self.id, wait=wait, timeout_seconds=timeout_seconds)

    def compact(self, *, wait: bool = False, timeout_seconds: float | None = None) -> None:
        self._system.compact(self.id, wait=wait, timeout_seconds=timeout_seconds)

    def wait_for_idle(self, *, timeout_seconds: float | None = None) -> bool:
        return self._system.wait_for_idle(self.id, timeout_seconds=timeout_seconds)

    def transcript(self) -> list[Message]:
        return self._system.transcript(self.id)

    @property
    def settings(self) -> Settings:
        return self._system.settings(self.id)

    @property
    def context_tokens(self) -> int | None:
        return self._system.context_tokens(self.id)

    @property
    def state(self) -> str:
        return self._system.state(self.id)
