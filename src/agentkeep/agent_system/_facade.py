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

from collections.abc import Sequence
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Unpack

from agentkeep.agent_system._agent import Agent
from agentkeep.agent_system._internals import SystemInternals
from agentkeep.agent_system._opening import (
    SystemOptions,
    check_open_arguments,
    recover_turns_at_open,
)
from agentkeep.agent_system._rows import AgentInfo, create_agent, list_agents, new_agent_row
from agentkeep.config import AgentConfig
from agentkeep.delivery import Delivery, SendOptions
from agentkeep.errors import UnknownAgentError
from agentkeep.loop.events import Start
from agentkeep.persistence.ledger import Subscription
from agentkeep.persistence.opening import open_store
from agentkeep.providers.catalog import Providers
from agentkeep.registry import Registry
from agentkeep.sessions import Sessions
from agentkeep.sessions import setup as session_setup
from agentkeep.types import JSONObject, Message, QueueableMessage, SessionEvent, Settings

_OPEN = object()


class AgentSystem:
    """Use :meth:`open`. A context manager: leaving the block closes the system."""

    def __init__(self, parts: SystemInternals, *, _token: object = None) -> None:
        if _token is not _OPEN:
            raise TypeError("AgentSystem has no public constructor: use AgentSystem.open(...)")
        self._parts = parts
        parts.port = self  # the references handed to tools and hooks see the system

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

        Raises:
            TypeError: an option that :class:`~agentkeep.SystemOptions` does not name.
            StoreLockedError: another owner holds the store.
            InvalidConfigError: a mode, provider, feature, tool or driver is invalid (naming
                it: a duplicate or reserved driver id, a bad timeout, a bad retry backoff).
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
            recover_turns_at_open(store)
            if args.resume:
                system.start()
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
        return Registry(parts.store.handle, admission=parts.admission, check=check)

    @property
    def sessions(self) -> Sessions:
        """Sessions: agents started from a definition's revision and pinned to
        it, and every other agent (see ``docs/sessions.md``)."""
        return Sessions(self._parts)

    def start(self, *agent_ids: str) -> list[str]:
        """Resume every agent that owes work, or — given ids — start exactly those agents:
        an explicit start continues whatever their durable state owes, including a question
        an abort left unanswered. Returns the ids started."""
        parts = self._parts
        if agent_ids:
            for agent_id in agent_ids:
                self.resolve(agent_id)  # UnknownAgentError for an id never created
            started = list(agent_ids)
        else:
            started = parts.reads.read(lambda tx: tx.facts.agents_owing_work())
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
        parts = self._parts
        with parts.admission.operation():
            row = new_agent_row(config, parts.features, id, parent)
            create_agent(parts.store.handle, row, initial_context)
            return Agent(self, row.id)

    def resolve(self, agent_id: str) -> Agent:
        """The agent with this id (its loop is not started). Raises ``UnknownAgentError``."""
        reads = self._parts.reads
        if reads.read(lambda tx: tx.agents.get(agent_id)) is None:
            raise UnknownAgentError(agent_id)
        return Agent(self, agent_id)

    def agents(self) -> list[AgentInfo]:
        """Every agent with its parent, metadata and whether it owes work."""
        return self._parts.reads.read(list_agents)

    def delete(self, agent_id: str, *, timeout_seconds: float | None = 30.0) -> None:
        """Close the agent (letting its work finish), release its id, keep what it wrote."""
        parts = self._parts
        # No new work while it drains (a steady sender cannot starve the delete), and the
        # deliveries admitted before it finish first (none can start an actor after removal).
        with parts.admission.operation(), parts.admission.deleting(agent_id, timeout_seconds):
            parts.agents.remove(agent_id, timeout_seconds=timeout_seconds)
            if not parts.store.transact(lambda tx: tx.agents.delete(agent_id)):
                raise UnknownAgentError(agent_id)

    # -- messages (the one acceptance path: ``_acceptance``) -------------------------------

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

    def steer(
        self, agent_id: str, message: QueueableMessage, **options: Unpack[SendOptions]
    ) -> Delivery:
        """Queue ``message`` on the steering queue (it outranks queued sends); the options
        are :meth:`send`'s."""
        return self._parts.acceptance.send(
            None, agent_id, "steering", message, options, where="AgentSystem.steer"
        )

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

    def update_metadata(self, agent_id: str, patch: JSONObject) -> JSONObject:
        """Shallow-merge ``patch`` into the agent's metadata; committed before it shows."""
        return self._parts.reads.update_metadata(agent_id, patch)

    def parent_of(self, agent_id: str) -> str | None:
        """The id of the agent's parent, or None. Raises ``UnknownAgentError``."""
        return self._parts.reads.parent_of(agent_id)

    def children_of(self, agent_id: str) -> list[str]:
        """The ids of the live (not deleted) agents created with this one as their parent,
        sorted. Raises ``UnknownAgentError``."""
        return self._parts.reads.children_of(agent_id)

    # -- requests to a running agent (``_requests``) ---------------------------------------

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

    def wait_for_idle(self, agent_id: str, *, timeout_seconds: float | None = None) -> bool:
        """Block until the agent has nothing running; False on timeout.

        Raises:
            UnknownAgentError: the agent was never created.
        """
        return self._parts.requests.wait_for_idle(agent_id, timeout_seconds=timeout_seconds)

    # -- stopping (``_stopping``) ----------------------------------------------------------

    def close(self, *, timeout_seconds: float | None = 30.0) -> None:
        """Admit nothing new, let admitted work finish (up to the timeout), stop every actor
        (destroying sessions once), and release the store's lock.

        Raises:
            AgentClosedError: called from inside an agent's own loop (a hook or a tool): that
                would wait for a turn that cannot finish. The close then goes on in the
                background.
        """
        self._parts.stopping.close(timeout_seconds=timeout_seconds)

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

    def wait_for_failure(self, timeout_seconds: float | None = None) -> BaseException | None:
        """Block until the system stopped on its own; returns the error (None on timeout)."""
        return self._parts.stopping.wait_for_failure(timeout_seconds)

    def install_signal_handlers(self) -> None:
        """For a daemon: SIGTERM and SIGINT start a graceful :meth:`shutdown` (call from the
        main thread). :meth:`wait_for_shutdown` blocks until it has finished."""
        self._parts.stopping.install_signal_handlers()

    def wait_for_shutdown(self, timeout_seconds: float | None = None) -> bool:
        """Block until the system has shut down and released the store — by a signal (see
        :meth:`install_signal_handlers`), :meth:`shutdown`, :meth:`close` or giving up;
        False on timeout."""
        return self._parts.stopping.wait_for_shutdown(timeout_seconds)
