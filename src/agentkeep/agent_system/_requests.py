"""The requests to a running agent: ``abort``, ``compact``, ``wait_for_idle`` and ``wake``.

Each tells the agent's actor (never waiting for its loop unless asked to, and never from
inside the loop it would wait for).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from agentkeep._admission import Admission
from agentkeep.actors.agent_tier import AgentTier
from agentkeep.actors.loop_thread import current_loop_agent
from agentkeep.agent_system._ownership import Ownership
from agentkeep.agent_system._reads import Reads
from agentkeep.errors import AwaitFromOwnLoopError
from agentkeep.loop.events import AbortRequested, CompactRequested, Start
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.store import Store
from agentkeep.runtime import session_turns

T = TypeVar("T")


class Requests:
    """``AgentSystem``'s requests to its agents (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        *,
        admission: Admission,
        agents: AgentTier,
        reads: Reads,
        ownership: Ownership | None = None,
    ) -> None:
        self._store = store
        self._ownership = ownership or Ownership(None)
        self._admission = admission
        self._agents = agents
        self._reads = reads

    def abort(
        self, agent_id: str, *, wait: bool = False, timeout_seconds: float | None = None
    ) -> None:
        """``AgentSystem.abort`` (documented there)."""
        self._ownership.check(agent_id)
        self._refuse_own_wait(agent_id, wait)
        known = self._agents.known(agent_id)
        if known is None:
            self._reads.require(agent_id)
            return  # an agent with no actor has no turn to abort
        # None: no turn was running; else whether the marking took back steers still queued.
        took_back = self._mark_turns(agent_id, "running", session_turns.cancelling)
        known.status.abort_pending = True  # a hook running now loses its actions
        if not self._agents.tell_if_live(agent_id, AbortRequested()):
            known.status.abort_pending = False
            return
        if took_back is None:
            if wait:
                known.status.wait_for_idle(timeout_seconds)
            return
        # A turn was cancelled: the turns queued behind it run, and a run that stopped on
        # a steer's input the marking took back (the loop's mirror still holds it) settles.
        if not wait:
            # A Start the aborted run takes up once it has stopped (loop.transitions.stop).
            if took_back or self._reads.read(lambda tx: bool(tx.queue.messages(agent_id))):
                self.wake(agent_id)
            return
        known.status.wait_for_idle(timeout_seconds)
        self._mark_turns(agent_id, "cancelling", session_turns.cancelled)
        queued, owes = self._reads.read(
            lambda tx: (bool(tx.queue.messages(agent_id)), tx.facts.read_owed(agent_id) is not None)
        )
        if queued or owes:
            self.wake(agent_id)
            if not queued:  # the wake only settles: return once it has (``wait``)
                known.status.wait_for_idle(timeout_seconds)

    def _mark_turns(
        self, agent_id: str, status: str, move: Callable[[Transaction, str], T]
    ) -> T | None:
        """Move the agent's turns in ``status`` with ``move``, in a transaction of its own —
        only if there is one (an abort without a turn commits nothing; an abort is refused
        inside a transaction, ``AgentSystem.abort``). Returns what ``move`` returned, or
        None if it did not run."""
        handle = self._store.handle
        if any(t.status == status for t in self._reads.read(lambda tx: tx.turns.started(agent_id))):
            return handle.transact(lambda tx: move(tx, agent_id))
        return None

    def compact(
        self, agent_id: str, *, wait: bool = False, timeout_seconds: float | None = None
    ) -> None:
        """``AgentSystem.compact`` (documented there)."""
        self._ownership.check(agent_id)
        self._refuse_own_wait(agent_id, wait)
        if wait:
            self._refuse_tool_to_tool_compact(agent_id)
        with self._admission.operation(), self._admission.agent_operation(agent_id):
            future = self._agents.get_or_make(agent_id).status.add_compaction_waiter()
            self._agents.tell(agent_id, CompactRequested(), counted=True)
        if wait:
            future.result(timeout_seconds)

    def wait_for_idle(self, agent_id: str, *, timeout_seconds: float | None = None) -> bool:
        """``AgentSystem.wait_for_idle`` (documented there)."""
        self._refuse_own_wait(agent_id, True)
        known = self._agents.known(agent_id)
        if known is None:
            self._reads.require(agent_id)
            return True  # no actor: nothing runs
        return known.status.wait_for_idle(timeout_seconds)

    def wake(self, agent_id: str) -> None:
        """Let the agent continue what its durable state owes (queued messages first), as
        accepting a message would; unlike ``start(agent_id)`` it does not answer again a
        question an abort left unanswered in this process."""
        self._ownership.check(agent_id)
        self._agents.tell(agent_id, Start(), counted=True)

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
