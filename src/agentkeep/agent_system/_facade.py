"""``AgentSystem``: a collection of durable agents over one store it owns exclusively.

The system supervises one actor per agent that has work; acceptance (``send``/``steer``) is a
transaction through the writer that never waits for the agent's loop, and only then tells the
agent's actor. ``open`` takes the store's lock, migrates, and resumes every agent that owes
work; ``close`` admits nothing new, lets admitted work finish, and releases the lock.

The class is a facade over the parts it owns (``_internals``): its reads (``_reads``), the
one acceptance path (``_acceptance``), the requests to a running agent (``_requests``) and
how it stops (``_stopping``); each public method is a one-line delegation, or says why not.
``open``'s options and their checks are ``_opening``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import TypeVar, Unpack

from msgspec import UNSET, UnsetType

from agentkeep.agent_system import _base_state as agent_state
from agentkeep.agent_system._agent import Agent
from agentkeep.agent_system._internals import SystemInternals
from agentkeep.agent_system._opening import (
    SystemOptions,
    check_open_arguments,
    recover_turns_at_open,
)
from agentkeep.agent_system._rows import AgentInfo, create_agent, list_agents, new_agent_row
from agentkeep.agent_system._transactions import outside_transaction
from agentkeep.config import AgentConfig
from agentkeep.delivery import Delivery, SendOptions
from agentkeep.errors import UnknownAgentError, UnknownFeatureError
from agentkeep.features import Feature
from agentkeep.loop.events import Start
from agentkeep.partitions import Partition
from agentkeep.persistence.ledger import Subscription
from agentkeep.persistence.opening import open_store
from agentkeep.providers.catalog import Providers
from agentkeep.refs import make_system_ref
from agentkeep.registry import Registry
from agentkeep.runtime.base_state import AgentBaseState
from agentkeep.sessions import Sessions
from agentkeep.sessions import setup as session_setup
from agentkeep.system_transaction import SystemTransaction
from agentkeep.types import JSONObject, Message, QueueableMessage, SessionEvent, Settings

T = TypeVar("T")
_OPEN = object()


class AgentSystem:
    """Use :meth:`open`. A context manager: leaving the block closes the system."""

    def __init__(self, parts: SystemInternals, *, _token: object = None) -> None:
        if _token is not _OPEN:
            raise TypeError("AgentSystem has no public constructor: use AgentSystem.open(...)")
        self._parts = parts
        parts.port = self  # the references handed to tools and hooks see the system
        parts.modules.attach(make_system_ref(self, parts.acceptance, None))

    @classmethod
    def open(
        cls,
        path: str | Path | None = None,
        *,
        providers: Providers,
        **options: Unpack[SystemOptions],
    ) -> AgentSystem:
        """Open the store at ``path`` (exclusively), migrate it, and resume owed work.

        ``providers`` serves the agents' models; every other option is one key of
        :class:`~agentkeep.SystemOptions` (each documented there, each with a default).

        In order: the store's own migrations; the turns the previous process left live
        are recovered; every module's missing migrations; every module's ``before_start``
        (its hooks join the features); the agents that owe work are restored and started
        (with ``resume``); every module's ``after_start`` (docs/modules.md). A failure
        after the store opened closes the system (no thread is left behind) and raises.

        With ``partition`` (a store on PostgreSQL), the system owns that partition of the
        store only: it recovers, restores and resumes that partition's agents, and refuses
        writes for the others (``PartitionNotOwnedError``, see ``SystemOptions``).

        Raises:
            TypeError: an option that :class:`~agentkeep.SystemOptions` does not name.
            StoreLockedError: another owner holds the store (or the partition: a classic
                owner and partition owners exclude each other).
            InvalidConfigError: a mode, provider, feature, module, tool or driver is invalid
                (naming it: a duplicate or reserved driver id, a bad timeout, a bad retry
                backoff, a module name taken by another module or a feature).
            ModuleMigrationError: a module's migration failed (naming the module and key).
            ModuleStartError: a module's ``before_start`` or ``after_start`` failed.
            ToolDefinitionError: two tools share a name (in one namespace).
            ModelNotServedError: ``provider`` does not serve ``model``.
        """
        args = check_open_arguments(providers, options)
        # The system supervisor starts (and restarts) the writer: see actors/tree.py.
        store = open_store(
            path,
            database=args.database,
            faults=args.testing.faults,
            vfs=args.testing.vfs,
            start_writer=False,
            max_event_bytes=args.max_event_bytes,
            max_input_bytes=args.max_input_bytes,
            database_path=args.database_path,
            clock=args.clock,
            partition=args.partition,
        )
        try:
            parts = SystemInternals(store, providers, args)
            system = cls(parts, _token=_OPEN)
            parts.start_tree()
        except BaseException:
            store.close()  # a system that never came to be must not keep the lock
            raise
        try:
            # Before any agent starts: turns the previous process left live (docs/turns.md).
            recover_turns_at_open(store, args.partition)
            with store.setup_lock():  # owners of a store's partitions: one at a time
                parts.modules.migrate()
            parts.modules.start()  # every before_start; their hooks join the features
            if args.resume:
                parts.modules.wait_for_restorations(system.start())
            parts.modules.after_start()
        except BaseException:
            system.close()
            raise
        return system

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def home(self) -> Path:
        """The directory of the system's store."""
        return self._parts.store.home

    @property
    def partition(self) -> Partition | None:
        """The partition of its store this system owns (``open(partition=...)``); None: the
        whole store."""
        return self._parts.ownership.partition

    @property
    def internals(self) -> SystemInternals:
        """The system's parts and plumbing (the raw store, ``deliver``, ``wake``, the live
        actors): an inspection hook for tests, the chaos campaigns and the CLI's demo, not
        part of the stable API (use the agent methods to read durable state)."""
        return self._parts

    @property
    def registry(self) -> Registry:
        """The versioned definitions (the wire's agents) in this system's store."""
        parts = self._parts
        check = partial(session_setup.check_written_model, providers=parts.providers)
        return Registry(
            parts.store.handle,
            admission=parts.admission,
            check=check,
            owner=parts.ownership.check_registry,
        )

    @property
    def sessions(self) -> Sessions:
        """Sessions: agents started from a definition's revision and pinned to
        it, and every other agent (see ``docs/sessions.md``)."""
        return Sessions(self._parts)

    @outside_transaction
    def start(self, *agent_ids: str) -> list[str]:
        """Resume every agent that owes work, or — given ids — start exactly those agents:
        an explicit start continues whatever their durable state owes, including a question
        an abort left unanswered. Returns the ids started. A partition's system resumes its
        partition's agents only, and refuses to start another's (``PartitionNotOwnedError``)."""
        parts = self._parts
        if agent_ids:
            for agent_id in agent_ids:
                parts.ownership.check(agent_id)
                self.resolve(agent_id)  # UnknownAgentError for an id never created
            started = list(agent_ids)
        else:
            started = parts.owed()
        for agent_id in started:
            parts.agents.tell(agent_id, Start(explicit=bool(agent_ids)), counted=True)
        return started

    def __enter__(self) -> AgentSystem:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def feature(self, name: str) -> Feature:
        """The running instance of the feature named ``name``: the object given to
        ``open(features=...)`` whose hooks every agent runs, so its owner can reach what
        belongs to it (pause a goal, read a counter).

        Raises:
            UnknownFeatureError: the system has no feature of that name (the message lists
                the ones it has).
        """
        features = self._parts.features
        found = features.get(name)
        if found is None:
            raise UnknownFeatureError(name, tuple(each.name for each in features.features))
        return found

    # -- agents ----------------------------------------------------------------------------

    @outside_transaction
    def create(
        self,
        config: AgentConfig | None = None,
        *,
        id: str | None = None,
        parent: str | None = None,
        initial_context: Sequence[Message] | None = None,
        instructions: str | UnsetType = UNSET,
        tools: Sequence[str] | UnsetType | None = UNSET,
    ) -> Agent:
        """Create an agent (claiming its id atomically); its loop does not start.

        ``instructions`` and ``tools`` set its initial base state (:meth:`base_state`),
        stored in the creating transaction; left out, it has the system's.

        A partition's system creates agents in its partition only: a fresh id is drawn there,
        and a given ``id`` or ``parent`` of another partition is refused.

        Raises:
            AgentExistsError: the id is taken.
            InvalidConfigError: the config, or a tool id ``tools`` names, is refused.
            PartitionNotOwnedError: ``id`` or ``parent`` is another partition's.
        """
        parts = self._parts
        state = agent_state.check(parts, instructions, tools)
        with parts.admission.operation():
            row = new_agent_row(config, parts.features, id, parent, ownership=parts.ownership)
            create_agent(
                parts.store.handle,
                row,
                initial_context,
                state,
                modules=parts.modules,
                partition=parts.ownership.partition_of(row.id),
            )
            return Agent(self, row.id)

    def base_state(self, agent_id: str) -> AgentBaseState:
        """The agent's own base state: the instructions its requests start from and the ids
        of the tools it is offered (None: every tool), which the features' ``instructions``
        and ``tools`` hooks extend. Until changed, a session's pinned revision's or the
        system's. Raises ``UnknownAgentError``."""
        return agent_state.read(self._parts, agent_id)

    @outside_transaction
    def update_base_state(
        self,
        agent_id: str,
        *,
        instructions: str | UnsetType = UNSET,
        tools: Sequence[str] | UnsetType | None = UNSET,
    ) -> AgentBaseState:
        """Change the agent's base state durably (what is left out is kept; ``tools=None``
        offers every tool again); its next request uses it. Returns the state in effect.

        Raises:
            UnknownAgentError: the agent does not exist.
            InvalidConfigError: ``tools`` names a tool the system does not offer.
            PartitionNotOwnedError: the agent is another partition's.
        """
        self._parts.ownership.check(agent_id)
        return agent_state.update(self._parts, agent_id, instructions, tools)

    @outside_transaction
    def resolve(self, agent_id: str) -> Agent:
        """The agent with this id (its loop is not started). Raises ``UnknownAgentError``."""
        reads = self._parts.reads
        if reads.read(lambda tx: tx.agents.get(agent_id)) is None:
            raise UnknownAgentError(agent_id)
        return Agent(self, agent_id)

    def agents(self) -> list[AgentInfo]:
        """Every agent with its parent, metadata and whether it owes work."""
        return self._parts.reads.read(list_agents)

    @outside_transaction
    def delete(self, agent_id: str, *, timeout_seconds: float | None = 30.0) -> None:
        """Close the agent (letting its work finish), release its id, keep what it wrote."""
        parts = self._parts
        parts.ownership.check(agent_id)
        # No new work while it drains (a steady sender cannot starve the delete), and the
        # deliveries admitted before it finish first (none can start an actor after removal).
        with parts.admission.operation(), parts.admission.deleting(agent_id, timeout_seconds):
            parts.agents.remove(agent_id, timeout_seconds=timeout_seconds)
            if not parts.store.transact(lambda tx: tx.agents.delete(agent_id)):
                raise UnknownAgentError(agent_id)

    # -- messages (the one acceptance path: ``_acceptance``) -------------------------------

    @outside_transaction
    def send(
        self, agent_id: str, message: QueueableMessage, **options: Unpack[SendOptions]
    ) -> Delivery:
        """Queue ``message`` on the agent's send queue; returns once it is durable.

        Args:
            agent_id: The agent (``UnknownAgentError`` if it was never created).
            message: A user, system or agent message (``ak.user(...)``).
            **options: :class:`~agentkeep.SendOptions`: the message's ``id`` (offering the
                same id again is an idempotent repeat), its ``metadata``, and the
                ``provider``, ``model``, ``effort``, ``service_tier``, ``permission_mode``
                and ``profile`` it selects.
        """
        return self._parts.acceptance.send(
            None, agent_id, "send", message, options, where="AgentSystem.send"
        )

    @outside_transaction
    def steer(
        self, agent_id: str, message: QueueableMessage, **options: Unpack[SendOptions]
    ) -> Delivery:
        """Queue ``message`` on the steering queue (it outranks queued sends); the options
        are :meth:`send`'s."""
        return self._parts.acceptance.send(
            None, agent_id, "steering", message, options, where="AgentSystem.steer"
        )

    # -- transactions (``_transactions``) --------------------------------------------------

    @outside_transaction
    def transaction(self, work: Callable[[SystemTransaction], T]) -> T:
        """Run ``work(t)`` in ONE store transaction and return what it returned.

        ``t`` (a :class:`~agentkeep.SystemTransaction`) offers stores bound to the
        transaction (``t.shared_kv(name)``, ``t.agent_kv(agent_id, name)``) and
        ``t.send``/``t.steer``, which write the queue entry and the owed fact inside it and
        tell the agent (starting an idle one) only after the commit — never waiting for it.
        A raise in ``work`` rolls all of it back and is re-raised here: no message queued,
        no agent woken, no event on the ledger. ``work`` runs in the store's writer thread
        while every other writer waits: keep it short, with no outside effects. Inside it,
        the commands that would wait for the writer or escape the rollback (``create``,
        ``resolve``, ``delete``, ``update_metadata``, ``abort``, ``compact``, ``start``,
        ``close``, ``shutdown``, the waits, and ``send``/``steer`` outside ``t``) raise
        :class:`~agentkeep.TransactionScopeError`; reads of committed state are allowed.

        Raises:
            AgentClosedError: the system is closing or closed.
            TransactionScopeError: called from inside a transaction (use the ``t`` you have;
                a hook's ``ctx.in_tx`` reuses its own).
            CommitOutcomeUnknownError: the COMMIT failed and may have landed (every agent
                ``t`` sent to is woken, so a message that did land runs); re-read by
                identity, or repeat with the same message ids (idempotent).
        """
        return self._parts.transactions.run(work)

    # -- reads (``_reads``) ----------------------------------------------------------------

    def transcript(self, agent_id: str) -> list[Message]:
        """The durable conversation; a deleted agent's stays readable (delete keeps it)."""
        return self._parts.reads.transcript(agent_id)

    def events(self, agent_id: str, *, after: int = 0, limit: int = 100) -> list[SessionEvent]:
        """Up to ``limit`` (at most 1000) committed ledger events of the session (agent) with
        a sequence above ``after``, in order; a deleted agent's ledger stays readable.

        Raises:
            UnknownAgentError: no agent was ever created with this id.
            InvalidConfigError: ``after`` is negative or ``limit`` is not 1..1000.
        """
        return self._parts.reads.events(agent_id, after=after, limit=limit)

    def subscribe(self, agent_id: str, *, after: int = 0, ephemeral: bool = False) -> Subscription:
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
        return self._parts.reads.subscribe(agent_id, after=after, ephemeral=ephemeral)

    def settings(self, agent_id: str) -> Settings:
        """The agent's current settings (the system's defaults until a message chose
        others). Raises ``UnknownAgentError``."""
        return self._parts.reads.settings(agent_id)

    def context_tokens(self, agent_id: str) -> int | None:
        """The agent's context size in tokens as last recorded (None while unknown).
        Raises ``UnknownAgentError``."""
        return self._parts.reads.context_tokens(agent_id)

    def state(self, agent_id: str) -> str:
        """``"running"``, ``"owes_work"`` or ``"idle"``; refused once close begins."""
        return self._parts.reads.state(agent_id)

    def metadata(self, agent_id: str) -> JSONObject:
        """A copy of the agent's metadata. Raises ``UnknownAgentError``."""
        return self._parts.reads.metadata(agent_id)

    @outside_transaction
    def update_metadata(self, agent_id: str, patch: JSONObject) -> JSONObject:
        """Shallow-merge ``patch`` into the agent's metadata; committed before it shows."""
        self._parts.ownership.check(agent_id)
        return self._parts.reads.update_metadata(agent_id, patch)

    def parent_of(self, agent_id: str) -> str | None:
        """The id of the agent's parent, or None. Raises ``UnknownAgentError``."""
        return self._parts.reads.parent_of(agent_id)

    def children_of(self, agent_id: str) -> list[str]:
        """The ids of the live (not deleted) agents created with this one as their parent,
        sorted. Raises ``UnknownAgentError``."""
        return self._parts.reads.children_of(agent_id)

    # -- requests to a running agent (``_requests``) ---------------------------------------

    @outside_transaction
    def abort(
        self, agent_id: str, *, wait: bool = False, timeout_seconds: float | None = None
    ) -> None:
        """Abort the agent's running turn (a no-op when it has none). The turn ends
        ``cancelled``: it is ``cancelling`` durably before the loop hears of the abort
        (docs/turns.md), with the input steers joined to it that still waited, and
        ``cancelled`` once the aborted work stopped (with ``wait``), or when the run
        settles. The turns queued behind it then run.

        Raises:
            UnknownAgentError: the agent was never created.
        """
        self._parts.requests.abort(agent_id, wait=wait, timeout_seconds=timeout_seconds)

    @outside_transaction
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
        self._parts.requests.compact(agent_id, wait=wait, timeout_seconds=timeout_seconds)

    @outside_transaction
    def wait_for_idle(self, agent_id: str, *, timeout_seconds: float | None = None) -> bool:
        """Block until the agent has nothing running; False on timeout.

        Raises:
            UnknownAgentError: the agent was never created.
        """
        return self._parts.requests.wait_for_idle(agent_id, timeout_seconds=timeout_seconds)

    # -- stopping (``_stopping``) ----------------------------------------------------------

    @outside_transaction
    def close(self, *, timeout_seconds: float | None = 30.0) -> None:
        """Admit nothing new, let admitted work finish (up to the timeout), stop every actor
        (destroying sessions once), and release the store's lock.

        Raises:
            AgentClosedError: called from inside an agent's own loop (a hook or a tool): that
                would wait for a turn that cannot finish. The close then goes on in the
                background.
        """
        self._parts.stopping.close(timeout_seconds=timeout_seconds)

    @outside_transaction
    def shutdown(self, *, timeout_seconds: float | None = 30.0) -> None:
        """Graceful shutdown: refuse new work, let in-flight inferences and tool calls finish
        and commit, stop before the next step; owed work resumes at the next open.

        Args:
            timeout_seconds: how long, in all (one deadline shared by every agent), the
                in-flight work may take to finish (None: no limit). Past it the agents are
                stopped anyway — a stream that never ends is cancelled, its response is not
                kept — and the work they owe stays durable for the next open.
        """
        self._parts.stopping.shutdown(timeout_seconds=timeout_seconds)

    @property
    def failure(self) -> BaseException | None:
        """Why the system stopped on its own (a failure storm past the restart intensity)."""
        return self._parts.stopping.failure

    @property
    def lost(self) -> str | None:
        """Why this system can no longer run its part of the store, None while it can: its
        ownership was lost (on PostgreSQL another owner took its store or partition while
        its session was down: it stopped writing for good), its store refuses writes for
        good, or it stopped on its own (:attr:`failure`). Cheap (flags, no round trip): a
        worker's coordinator asks it at every tick."""
        parts = self._parts
        if parts.store.ownership_lost:
            return "ownership_lost"
        refusal = parts.store.refusal
        if refusal is not None:
            return f"store_refused: {refusal}"
        failure = parts.stopping.failure
        if failure is not None:
            return f"failed: {failure!r}"
        return None

    @outside_transaction
    def wait_for_failure(self, timeout_seconds: float | None = None) -> BaseException | None:
        """Block until the system stopped on its own; returns the error (None on timeout)."""
        return self._parts.stopping.wait_for_failure(timeout_seconds)

    def install_signal_handlers(self) -> None:
        """For a daemon: SIGTERM and SIGINT start a graceful :meth:`shutdown` (call from the
        main thread). :meth:`wait_for_shutdown` blocks until it has finished."""
        self._parts.stopping.install_signal_handlers()

    @outside_transaction
    def wait_for_shutdown(self, timeout_seconds: float | None = None) -> bool:
        """Block until the system has shut down and released the store — by a signal (see
        :meth:`install_signal_handlers`), :meth:`shutdown`, :meth:`close` or giving up;
        False on timeout."""
        return self._parts.stopping.wait_for_shutdown(timeout_seconds)
