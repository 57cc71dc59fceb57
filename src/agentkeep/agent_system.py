"""``AgentSystem``: a collection of durable agents over one store it owns exclusively.

The system supervises one actor per agent that has work; acceptance (``send``/``steer``) is a
transaction through the writer that never waits for the agent's loop, and only then tells the
agent's actor. ``open`` takes the store's lock, migrates, and resumes every agent that owes
work; ``close`` admits nothing new, lets admitted work finish, and releases the lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import structlog

from agentkeep._admission import Admission
from agentkeep._agent_rows import (
    AgentInfo,
    create_agent,
    list_agents,
    merge_metadata,
    new_agent_row,
)
from agentkeep._signals import ShutdownSignals
from agentkeep.actors.agent_actor import LoopOptions
from agentkeep.actors.agent_factory import AgentFactory
from agentkeep.actors.directory import KnownAgent
from agentkeep.actors.loop_thread import current_loop_agent
from agentkeep.actors.registry import AgentRegistry
from agentkeep.actors.status import AgentStatus
from agentkeep.actors.supervisor import Backoff, RestartIntensity
from agentkeep.actors.tree import start_system_tree
from agentkeep.agent import Agent
from agentkeep.config import AgentConfig
from agentkeep.delivery import Delivery, prepare_acceptance
from agentkeep.drivers.host import (
    DEFAULT_CANCEL_GRACE_SECONDS,
    DEFAULT_TURN_TIMEOUT_SECONDS,
    DriverHost,
    check_drivers,
    check_seconds,
)
from agentkeep.drivers.types import Driver
from agentkeep.errors import (
    AgentClosedError,
    AwaitFromOwnLoopError,
    CommitOutcomeUnknownError,
    InvalidConfigError,
    StoreClosedError,
    UnknownAgentError,
)
from agentkeep.fault_injection import FaultInjection
from agentkeep.features import Feature, FeatureSet
from agentkeep.loop.context import RetryPolicy
from agentkeep.loop.events import (
    AbortRequested,
    CompactRequested,
    ShutdownRequested,
    Start,
    StopRetrying,
    WorkAccepted,
)
from agentkeep.loop.plans import QueueMode
from agentkeep.model import (
    ConversationRecord,
    JSONObject,
    Message,
    MessageOptions,
    PermissionMode,
    QueueableMessage,
    QueuedMessage,
    QueueName,
    ReasoningEffort,
    ServiceTier,
    SessionEvent,
    Settings,
    rebuild_messages,
)
from agentkeep.model.ledger import DEFAULT_MAX_EVENT_BYTES, DEFAULT_MAX_INPUT_BYTES
from agentkeep.model.turns import NATIVE_DRIVER
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.ledger import Subscription, check_page
from agentkeep.persistence.store import Store
from agentkeep.providers.registry import Providers
from agentkeep.refs import make_system_ref
from agentkeep.registry import Registry
from agentkeep.runtime import session_turns
from agentkeep.sessions import Sessions
from agentkeep.sessions import setup as session_setup
from agentkeep.sessions import tables as session_tables
from agentkeep.sessions.recovery import needs_recovery, recover_turns
from agentkeep.tools import Tool, ToolSet

log = structlog.get_logger(__name__)

T = TypeVar("T")

_MODES = ("one-at-a-time", "all")
_TREE_STOP_SECONDS = 60.0


def _checked(name: str, given: object, kind: type[T], what: str) -> list[T]:
    """``given`` as a list of ``kind``, or ``InvalidConfigError`` naming the first element
    that is not one (checked at ``open``, not at the first turn that would use it)."""
    if isinstance(given, str | bytes) or not isinstance(given, Iterable):
        raise InvalidConfigError(f"{name} must be a list, got {type(given).__name__}")
    items = list(given)
    for index, item in enumerate(items):
        if not isinstance(item, kind):
            raise InvalidConfigError(
                f"{name}[{index}] is {item!r} ({type(item).__name__}), not {what}"
            )
    return items


def _require_session(tx: Transaction, session_id: str) -> None:
    """``UnknownAgentError`` unless the id names an agent, live or deleted."""
    if not tx.session_known(session_id):
        raise UnknownAgentError(session_id)


#: How often opening retries the turn recovery's transaction before going on without it.
_RECOVERY_ATTEMPTS = 4


def _recover_turns(store: Store) -> None:
    """Run the startup turn recovery (``sessions/recovery.py``), retrying a failing store
    (a writer being restarted, an I/O error) with a short backoff. If it still fails, the
    system opens anyway — a store that fails now fails the work that follows just as clearly
    — and the turns end later: a native ``cancelling`` turn with its run's settlement or next
    answer, a driver turn when its session's runner finds it orphaned."""
    for attempt in range(_RECOVERY_ATTEMPTS):
        try:
            if store.read(needs_recovery):
                store.handle.transact(recover_turns)
            return
        except Exception as error:  # the next attempt, or the log below, says what failed
            if attempt == _RECOVERY_ATTEMPTS - 1:
                log.error("turn_recovery_deferred", error=repr(error))
                return
            log.warning("turn_recovery_retried", attempt=attempt + 1, error=repr(error))
            time.sleep(0.05 * 2**attempt)


def _retry_policy(forever: bool, initial: float, maximum: float) -> RetryPolicy | None:
    """The backoff of ``retry_forever`` (None: give up after three failed turns).

    Raises:
        InvalidConfigError: a bound is not a positive finite number, or the cap is below
            the initial wait.
    """
    for name, value in (("retry_initial_seconds", initial), ("retry_max_seconds", maximum)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidConfigError(f"{name} must be a number of seconds, got {value!r}")
        if not (0 < value < float("inf")):
            raise InvalidConfigError(f"{name} must be positive and finite, got {value!r}")
    if maximum < initial:
        raise InvalidConfigError(
            f"retry_max_seconds ({maximum!r}) must not be below retry_initial_seconds ({initial!r})"
        )
    if not isinstance(forever, bool):
        raise InvalidConfigError(f"retry_forever must be True or False, got {forever!r}")
    return RetryPolicy(float(initial), float(maximum)) if forever else None


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
        intensity: RestartIntensity,
        backoff: Backoff,
        drivers: Sequence[Driver] = (),
        turn_timeout_seconds: float = DEFAULT_TURN_TIMEOUT_SECONDS,
        driver_cancel_grace_seconds: float = DEFAULT_CANCEL_GRACE_SECONDS,
        retry: RetryPolicy | None = None,
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
            owed=lambda: store.read(lambda tx: tx.agents_owing_work()),
        )
        store.on_writer_failure = self._agents.writer_failed
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
        ``testing``: fault injection for the tests and chaos campaigns only
        (:class:`agentkeep.chaos.FaultInjection`); never set it in production.

        Raises:
            StoreLockedError: another owner holds the store.
            InvalidConfigError: a mode, provider, feature, tool or driver is invalid (naming
                it: a duplicate or reserved driver id, a bad timeout, a bad retry backoff).
            ToolDefinitionError: two tools share a name (in one namespace).
            ModelNotServedError: ``provider`` does not serve ``model``.
        """
        for name, mode in (("steering_mode", steering_mode), ("send_mode", send_mode)):
            if mode not in _MODES:
                raise InvalidConfigError(f"{name} must be one of {_MODES}, got {mode!r}")
        if provider is not None and providers.get(provider) is None:
            raise InvalidConfigError(f'Provider "{provider}" is not registered.')
        if provider is not None and model is not None:
            providers.check_model(provider, model)  # ModelNotServedError for a typo
        feature_set = FeatureSet(_checked("features", features, Feature, "an ak.Feature"))
        ToolSet(_checked("tools", tools, Tool, "an ak.Tool (build one with @ak.tool)"))
        checked_drivers = check_drivers(drivers)
        timeout = check_seconds("turn_timeout_seconds", turn_timeout_seconds, zero=False)
        grace = check_seconds("driver_cancel_grace_seconds", driver_cancel_grace_seconds, zero=True)
        retry = _retry_policy(retry_forever, retry_initial_seconds, retry_max_seconds)
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
                features=feature_set,
                tools=tools,
                instructions=instructions,
                steering_mode=steering_mode,
                send_mode=send_mode,
                idle_grace_seconds=idle_grace_seconds,
                intensity=restart_intensity
                or RestartIntensity(max_restarts=5, period_seconds=10.0),
                backoff=restart_backoff or Backoff(initial_seconds=0.05, max_seconds=2.0),
                drivers=checked_drivers,
                turn_timeout_seconds=timeout,
                driver_cancel_grace_seconds=grace,
                retry=retry,
            )
        except BaseException:
            store.close()  # a system that never came to be must not keep the lock
            raise
        try:
            # Before any agent starts: turns the previous process left live (docs/turns.md).
            _recover_turns(store)
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
        return Registry(self._store.handle, admission=self._admission)

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
            started = self._read(lambda tx: tx.agents_owing_work())
        for agent_id in started:
            self._agents.tell(agent_id, Start(explicit=bool(agent_ids)), counted=True)
        return started

    def wake(self, agent_id: str) -> None:
        """Let the agent continue what its durable state owes (queued messages first), as
        accepting a message would; unlike ``start(agent_id)`` it does not answer again a
        question an abort left unanswered in this process."""
        self._agents.tell(agent_id, Start(), counted=True)

    def cancel_driver_turn(self, session_id: str, turn_id: str) -> None:
        """Fire the cancel signal of an injected driver's running turn (``sessions.cancel``
        calls this once the turn's ``cancelling`` is durable)."""
        self._drivers.cancel(turn_id)

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
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        if not self._admission.begin_close(timeout_seconds):
            return  # another close or shutdown did the work
        # Retrying forever never finishes on its own: closing stops it (the work stays owed).
        self._agents.tell_all(StopRetrying())
        # After the tree gave up no actor is left to finish anything: do not wait for one.
        for agent_id in self._agents.live() if self._failure is None else ():
            known = self._agents.known(agent_id)
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if known is not None and not known.status.wait_for_idle(remaining):
                log.warning("agent_close_timed_out", agent_id=agent_id)
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        if self._failure is None and not self._drivers.wait_idle(remaining):
            log.warning("driver_close_timed_out")
        self._stop_tree()

    def shutdown(self, *, timeout_seconds: float | None = 30.0) -> None:
        """Graceful shutdown: refuse new work, let in-flight inferences and tool calls finish
        and commit, stop before the next step; owed work resumes at the next open.

        Args:
            timeout_seconds: how long, in all (one deadline shared by every agent), the
                in-flight work may take to finish (None: no limit). Past it the agents are
                stopped anyway — a stream that never ends is cancelled, its response is not
                kept — and the work they owe stays durable for the next open.
        """
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        if not self._admission.begin_close(_TREE_STOP_SECONDS):
            return  # another close or shutdown did the work
        self._agents.tell_all(ShutdownRequested())
        for agent_id in self._agents.live():
            known = self._agents.known(agent_id)
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if known is not None and not known.status.wait_for_idle(remaining):
                log.warning("agent_shutdown_timed_out", agent_id=agent_id)
        self._stop_tree()

    def _stop_tree(self) -> None:
        """Stop the agents, then the writer (reverse start order), then release the store."""
        self._drivers.stop()  # runs still going get their cancel signal and grace
        self._agents.stop_all()
        try:
            self._tree.stop(timeout_seconds=_TREE_STOP_SECONDS)
        except Exception as error:  # it gave up (and stopped) already, or timed out
            log.warning("agent_system_tree_stop_failed", error=repr(error))
        finally:
            self._store.close()
            self._admission.closed()
            self._shut_down.set()

    @property
    def failure(self) -> BaseException | None:
        """Why the system stopped on its own (a failure storm past the restart intensity)."""
        return self._failure

    def wait_for_failure(self, timeout_seconds: float | None = None) -> BaseException | None:
        """Block until the system stopped on its own; returns the error (None on timeout)."""
        self._stopped.wait(timeout_seconds)
        return self._failure

    def _gave_up(self, error: BaseException) -> None:
        """The system supervisor gave up (it has stopped the agents and the writer): release
        the store cleanly, keep the durable state, surface the error."""
        log.error("agent_system_gave_up", error=repr(error))
        self._failure = error

        def stop() -> None:
            try:
                self.close(timeout_seconds=5.0)
            finally:
                self._stopped.set()

        threading.Thread(target=stop, name="agentkeep-give-up", daemon=True).start()

    def install_signal_handlers(self) -> None:
        """For a daemon: SIGTERM and SIGINT start a graceful :meth:`shutdown` (call from the
        main thread). :meth:`wait_for_shutdown` blocks until it has finished."""
        self._signals = ShutdownSignals(self.shutdown)
        self._signals.install()

    def wait_for_shutdown(self, timeout_seconds: float | None = None) -> bool:
        """Block until the system has shut down and released the store — by a signal (see
        :meth:`install_signal_handlers`), :meth:`shutdown`, :meth:`close` or giving up;
        False on timeout."""
        return self._shut_down.wait(timeout_seconds)

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
        if self._read(lambda tx: tx.get_agent(agent_id)) is None:
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
        if not self._store.transact(lambda tx: tx.delete_agent(agent_id)):
            raise UnknownAgentError(agent_id)

    # -- delivery --------------------------------------------------------------------------

    def send(
        self,
        agent_id: str,
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
        """Queue ``message`` on the agent's send queue; returns once it is durable.

        Args:
            agent_id: The agent (``UnknownAgentError`` if it was never created).
            message: A user, system or agent message (``ak.user(...)``).
            id: The message's id: offering the same id again is an idempotent repeat.
            metadata: Stored with the message, shown to ``message_accepted`` hooks.
            provider: Switch to this provider when the message is consumed.
            model: Switch to this model when the message is consumed.
            effort: Reasoning effort from this message on.
            service_tier: Service tier from this message on.
            permission_mode: Permission mode from this message on.
        """
        return self._offer(
            None,
            agent_id,
            "send",
            message,
            id=id,
            metadata=metadata,
            provider=provider,
            model=model,
            effort=effort,
            service_tier=service_tier,
            permission_mode=permission_mode,
        )

    def steer(
        self,
        agent_id: str,
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
        """Queue ``message`` on the steering queue (it outranks queued sends); the options
        are :meth:`send`'s."""
        return self._offer(
            None,
            agent_id,
            "steering",
            message,
            id=id,
            metadata=metadata,
            provider=provider,
            model=model,
            effort=effort,
            service_tier=service_tier,
            permission_mode=permission_mode,
        )

    def _offer(
        self,
        tx: Transaction | None,
        agent_id: str,
        queue: QueueName,
        message: QueueableMessage,
        *,
        id: str | None,
        metadata: JSONObject | None,
        provider: str | None,
        model: str | None,
        effort: ReasoningEffort | None,
        service_tier: ServiceTier | None,
        permission_mode: PermissionMode | None,
    ) -> Delivery:
        """Every ``send``/``steer`` of every surface (``Agent``, ``AgentRef``, the system and
        its reference) ends here, so they cannot disagree: inside ``tx`` (a hook running in
        a transaction) or as its own transaction."""
        options = MessageOptions(
            provider=provider,
            model=model,
            effort=effort,
            service_tier=service_tier,
            permission_mode=permission_mode,
        )
        if tx is not None:
            return self._deliver_within(
                tx, agent_id, queue, message, id=id, metadata=metadata, options=options
            )
        return self.deliver(agent_id, queue, message, id=id, metadata=metadata, options=options)

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
        idempotency_key: str | None = None,
    ) -> Delivery:
        """Queue a message durably and wake the agent; returns once it is durable.

        ``start=False`` only queues it (the owed fact is written, so the next ``open`` or
        ``start`` resumes it) without starting the agent now (a turn of an injected driver
        runs regardless). ``idempotency_key``: the
        turn's key (docs/turns.md); a repeat returns the turn it made, writing nothing.
        """
        with self._admission.operation(), self._admission.agent_operation(agent_id):
            return self._deliver(
                agent_id, queue, message, id, metadata, options, start, idempotency_key
            )

    def _deliver(
        self,
        agent_id: str,
        queue: QueueName,
        message: QueueableMessage,
        id: str | None,
        metadata: JSONObject | None,
        options: MessageOptions | None,
        start: bool,
        idempotency_key: str | None = None,
    ) -> Delivery:
        accept = prepare_acceptance(
            self._providers,
            agent_id,
            queue,
            message,
            message_id=id,
            metadata=metadata,
            options=options,
            defaults=self._defaults,
            idempotency_key=idempotency_key,
        )
        routed = self._routed(
            agent_id, queue, message, accept, id, metadata, options, idempotency_key
        )
        try:
            delivery, queued = self._store.transact(routed)
        except CommitOutcomeUnknownError:
            # It may have landed: wake the agent so a message that did is not left waiting
            # for the next start. The caller re-offers with the same id (idempotent).
            if start:
                self._agents.tell(agent_id, Start(), counted=True)
                self._drivers.wake(agent_id)
            raise
        if queued is not None and start:
            self._agents.tell(agent_id, WorkAccepted(message=queued), counted=True)
        elif queued is None and delivery.created:
            # A driver turn: its runner runs it now, ``start`` or not (a driver turn left
            # queued would only be interrupted at the next open: docs/drivers.md).
            self._drivers.wake(agent_id)
        return delivery

    def _routed(
        self,
        agent_id: str,
        queue: QueueName,
        message: QueueableMessage,
        native: Callable[[Transaction], tuple[Delivery, QueuedMessage | None]],
        id: str | None,
        metadata: JSONObject | None,
        options: MessageOptions | None,
        idempotency_key: str | None,
    ) -> Callable[[Transaction], tuple[Delivery, QueuedMessage | None]]:
        """The acceptance of a message to ``agent_id``: the native queue, or a turn of the
        session's injected driver (decided inside the transaction: docs/drivers.md)."""
        as_driver_turn = self._drivers.prepare(
            agent_id,
            queue,
            message,
            message_id=id,
            metadata=metadata,
            options=options,
            idempotency_key=idempotency_key,
        )

        def accept(tx: Transaction) -> tuple[Delivery, QueuedMessage | None]:
            driver = session_tables.session_driver(tx, agent_id)
            if driver == NATIVE_DRIVER:
                return native(tx)
            return as_driver_turn(tx, driver), None

        return accept

    def _deliver_within(
        self,
        tx: Transaction,
        agent_id: str,
        queue: QueueName,
        message: QueueableMessage,
        *,
        id: str | None,
        metadata: JSONObject | None,
        options: MessageOptions | None,
    ) -> Delivery:
        """Queue a message inside ``tx`` (a hook running in a transaction): durable with it,
        and the agent is told only after it committed, so a rollback leaves no live effect."""
        with self._admission.operation(), self._admission.agent_operation(agent_id):
            accept = prepare_acceptance(
                self._providers,
                agent_id,
                queue,
                message,
                message_id=id,
                metadata=metadata,
                options=options,
                defaults=self._defaults,
            )
            routed = self._routed(agent_id, queue, message, accept, id, metadata, options, None)
            delivery, queued = routed(tx)
        if queued is not None:
            tx.after_commit(
                lambda: self._agents.tell(agent_id, WorkAccepted(message=queued), counted=True)
            )
        elif delivery.created:
            # A driver turn. Waking may start a runner (an ask to its supervisor): never in
            # the writer's thread, where after-commit callbacks run.
            tx.after_commit(lambda: self._drivers.wake_soon(agent_id))
        return delivery

    def abort(
        self, agent_id: str, *, wait: bool = False, timeout_seconds: float | None = None
    ) -> None:
        """Abort the agent's running turn (a no-op when it has none). The turn ends
        ``cancelled``: it is ``cancelling`` durably before the loop hears of the abort
        (docs/turns.md), and ``cancelled`` once the aborted work stopped (with ``wait``),
        or when the run settles.

        Raises:
            UnknownAgentError: the agent was never created.
        """
        self._refuse_own_wait(agent_id, wait)
        known = self._agents.known(agent_id)
        if known is None:
            self._require(agent_id)
            return  # an agent with no actor has no turn to abort
        self._mark_turns(agent_id, "running", session_turns.cancelling)
        known.status.abort_pending = True  # a hook running now loses its actions
        if not self._agents.tell_if_live(agent_id, AbortRequested()):
            known.status.abort_pending = False
            return
        if wait:
            known.status.wait_for_idle(timeout_seconds)
            self._mark_turns(agent_id, "cancelling", session_turns.cancelled)

    def _mark_turns(
        self, agent_id: str, status: str, move: Callable[[Transaction, str], object]
    ) -> None:
        """Move the agent's turns in ``status`` with ``move``, in a transaction of its own —
        only if there is one (an abort without a turn commits nothing), and not from inside
        a transaction (a hook's: its turn then ends with the run's settlement)."""
        handle = self._store.handle
        if handle.in_transaction:
            return
        if any(t.status == status for t in self._read(lambda tx: tx.live_turns(agent_id))):
            handle.transact(lambda tx: move(tx, agent_id))

    def compact(
        self, agent_id: str, *, wait: bool = False, timeout_seconds: float | None = None
    ) -> None:
        """Ask the agent to compact its context (after its current step); with ``wait``,
        block until that compaction's outcome (callers asking meanwhile share it).

        Raises:
            UnknownAgentError: the agent was never created.
            AgentClosedError: the system is closing or closed.
            AwaitFromOwnLoopError: ``wait`` from inside the agent's own loop, or from inside
                another agent's loop while this agent runs a tool (that tool may be waiting
                for the caller: two agents would wait for each other).
            CompactionFailedError: (with ``wait``) the compaction failed or was not confirmed.
            TimeoutError: (with ``wait``) no outcome within ``timeout_seconds``.
        """
        self._refuse_own_wait(agent_id, wait)
        if wait:
            self._refuse_tool_to_tool_compact(agent_id)
        with self._admission.operation(), self._admission.agent_operation(agent_id):
            future = self._agents.get_or_make(agent_id).status.add_compaction_waiter()
            self._agents.tell(agent_id, CompactRequested(), counted=True)
        if wait:
            future.result(timeout_seconds)

    def wait_for_idle(self, agent_id: str, *, timeout_seconds: float | None = None) -> bool:
        """Block until the agent has nothing running; False on timeout.

        Raises:
            UnknownAgentError: the agent was never created.
        """
        self._refuse_own_wait(agent_id, True)
        known = self._agents.known(agent_id)
        if known is None:
            self._require(agent_id)
            return True  # no actor: nothing runs
        return known.status.wait_for_idle(timeout_seconds)

    # -- reads (each raises UnknownAgentError for an id never created) ---------------------

    def transcript(self, agent_id: str) -> list[Message]:
        """The durable conversation; a deleted agent's stays readable (delete keeps it)."""

        def read(tx: Transaction) -> list[ConversationRecord]:
            records = tx.load_records(agent_id)
            if not records and tx.get_agent(agent_id) is None:
                raise UnknownAgentError(agent_id)
            return records

        return rebuild_messages(self._read(read))

    def events(self, session_id: str, *, after: int = 0, limit: int = 100) -> list[SessionEvent]:
        """Up to ``limit`` (at most 1000) committed ledger events of the session (agent) with
        a sequence above ``after``, in order; a deleted agent's ledger stays readable.

        Raises:
            UnknownAgentError: no agent was ever created with this id.
            InvalidConfigError: ``after`` is negative or ``limit`` is not 1..1000.
        """
        check_page(after, limit)

        def read(tx: Transaction) -> list[SessionEvent]:
            _require_session(tx, session_id)
            return tx.events(session_id, after, limit)

        return self._read(read)

    def subscribe(
        self, session_id: str, *, after: int = 0, ephemeral: bool = False
    ) -> Subscription:
        """The session's committed events after ``after``: the backlog, then live events as
        they commit, each exactly once, in order (usable from another thread; closed by
        :meth:`close`). Resubscribe from ``last_sequence`` to resume without a gap.

        ``ephemeral=True`` also delivers, interleaved, the live-only ``text.delta`` events
        published while the subscription is open (``sequence == 0``: never stored, never
        replayed; a slow subscriber loses the oldest of them, never a durable event).

        Raises:
            UnknownAgentError: no agent was ever created with this id.
            InvalidConfigError: ``after`` is negative.
        """
        check_page(after, 1)
        self._read(lambda tx: _require_session(tx, session_id))
        return Subscription(session_id, after, self._store.ledger, self._read, ephemeral=ephemeral)

    def settings(self, agent_id: str) -> Settings:
        """The agent's current settings (the system's defaults until a message chose
        others). Raises ``UnknownAgentError``."""
        return self._read_agent(agent_id, lambda tx: tx.read_settings(agent_id)) or self._defaults

    def context_tokens(self, agent_id: str) -> int | None:
        """The agent's context size in tokens as last recorded (None while unknown).
        Raises ``UnknownAgentError``."""
        return self._read_agent(agent_id, lambda tx: tx.read_context_tokens(agent_id))

    def state(self, agent_id: str) -> str:
        """``"running"``, ``"owes_work"`` or ``"idle"``; refused once close begins."""
        owed = self._read_agent(agent_id, lambda tx: tx.read_owed(agent_id))
        known = self._agents.known(agent_id)
        if known is not None and not known.status.idle:
            return "running"
        return "idle" if owed is None else "owes_work"

    def metadata(self, agent_id: str) -> JSONObject:
        """A copy of the agent's metadata. Raises ``UnknownAgentError``."""
        row = self._read(lambda tx: tx.get_agent(agent_id))
        if row is None:
            raise UnknownAgentError(agent_id)
        return dict(row.metadata)

    def update_metadata(self, agent_id: str, patch: JSONObject) -> JSONObject:
        """Shallow-merge ``patch`` into the agent's metadata; committed before it shows."""
        if not isinstance(patch, dict):
            raise InvalidConfigError("a metadata update must be a JSON object")
        with self._admission.operation():
            return merge_metadata(
                self._store.handle,
                self._features,
                lambda agent_id: self._agents.get_or_make(agent_id).contexts,
                self._defaults,
                agent_id,
                patch,
            )

    def parent_of(self, agent_id: str) -> str | None:
        """The id of the agent's parent, or None. Raises ``UnknownAgentError``."""
        row = self._read(lambda tx: tx.get_agent(agent_id))
        if row is None:
            raise UnknownAgentError(agent_id)
        return row.parent_id

    def children_of(self, agent_id: str) -> list[str]:
        """The ids of the live (not deleted) agents created with this one as their parent,
        sorted. Raises ``UnknownAgentError``."""
        return self._read_agent(agent_id, lambda tx: tx.children_of(agent_id))

    # -- internals -------------------------------------------------------------------------

    def _read(self, work: Callable[[Transaction], T]) -> T:
        """A snapshot read; after close begins, ``AgentClosedError`` like every operation."""
        self._admission.check_open()
        try:
            return self._store.read(work)
        except StoreClosedError:
            raise AgentClosedError("The agent system has been closed.") from None

    def _read_agent(self, agent_id: str, work: Callable[[Transaction], T]) -> T:
        """``work`` on a snapshot in which the agent exists (``UnknownAgentError`` if not)."""

        def read(tx: Transaction) -> T:
            if tx.get_agent(agent_id) is None:
                raise UnknownAgentError(agent_id)
            return work(tx)

        return self._read(read)

    def _require(self, agent_id: str) -> None:
        """Raise ``UnknownAgentError`` unless the agent exists."""
        self._read_agent(agent_id, lambda tx: None)

    def _refuse_own_wait(self, agent_id: str, wait: bool) -> None:
        if wait and current_loop_agent() == agent_id:
            raise AwaitFromOwnLoopError(
                f'Waiting for agent "{agent_id}" from inside its own loop would wait for itself.'
            )

    def _refuse_tool_to_tool_compact(self, agent_id: str) -> None:
        """A waited compact asked from inside one agent's loop of an agent running a tool is
        refused outright: the compaction waits for that tool, which may be waiting for the
        caller (seed: the one cross-agent wait that cannot be allowed)."""
        caller = current_loop_agent()
        if caller is None or caller == agent_id:
            return
        known = self._agents.known(agent_id)
        if known is not None and known.status.tool_running:
            raise AwaitFromOwnLoopError(
                f'Waiting from inside agent "{caller}"\'s loop for a compaction of agent '
                f'"{agent_id}", which is running a tool, could deadlock: that tool may be '
                f'waiting for agent "{caller}". Ask without wait=True.'
            )

    def _make_agent(
        self, agent_id: str, *, status: AgentStatus, on_stopped: Callable[[str, bool], None]
    ) -> KnownAgent:
        """The registry's entry for ``agent_id`` (``AgentFactory.make`` with its row).

        Raises:
            UnknownAgentError: the agent was never created (or has been deleted).
        """
        row, pinned = self._store.read(
            lambda tx: (tx.get_agent(agent_id), session_tables.pinned_definition(tx, agent_id))
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
            tools=(
                None
                if pinned is None
                else session_setup.select_tools(self._tools, pinned.toolbox.tool_ids)
            ),
        )

    def wait_for_passivation(self, agent_id: str, *, timeout_seconds: float | None = None) -> bool:
        """Block until the agent has no actor (it settled and its grace period passed)."""
        return self._agents.wait_for_passivation(agent_id, timeout_seconds)

    def live_agents(self) -> list[str]:
        """Ids of agents that currently have an actor (not passivated)."""
        return self._agents.live()
