"""The agents the tier knows, and the idle accounting across them.

An agent is *known* from its first accepted work (or the first question about its status
that needs one) until it is passivated, removed, or left behind by a tier restart without
owed work. Its :class:`~agentkeep.actors.status.AgentStatus` outlives its actor incarnations,
so a caller waiting on it keeps waiting across a restart.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import pykka

from agentkeep.actors.hook_contexts import HookContexts
from agentkeep.actors.status import AgentStatus


@dataclass(frozen=True, kw_only=True)
class KnownAgent:
    """One agent the tier knows: what callers wait on, and how to start its actor."""

    agent_id: str
    status: AgentStatus
    contexts: HookContexts  # its features' contexts, for hooks run outside its actor
    # Starts one incarnation of its actor; called in the agents supervisor's thread, on the
    # first start and on every restart.
    start_actor: Callable[[], pykka.ActorRef[Any]]


class MakeAgent(Protocol):
    """Makes a :class:`KnownAgent` (``AgentFactory.make`` bound to the system)."""

    def __call__(
        self, agent_id: str, *, status: AgentStatus, on_stopped: Callable[[str, bool], None]
    ) -> KnownAgent:
        """Raises ``UnknownAgentError`` for an agent that was never created."""
        ...


class AgentDirectory:
    """The known agents by id, and whether the agent tier is waiting for its restart.

    Between a store writer failure and the agent tier's restart every known agent counts as
    busy (``hold_all_for_restart``), and so does one made meanwhile, so ``wait_for_idle``
    cannot return in the middle of the recovery.

    Locking: one lock. It guards ``_known`` and ``_restarting``; while holding it a method
    touches only those and, at most, one ``AgentStatus`` counter (whose condition is a leaf).
    The factory (a store read) and the statuses' ``start_over`` (which resolves futures) run
    outside it. So any thread may call any method under any other lock — the store writer's
    (``hold_all_for_restart``) and the system supervisor's (``start_over_all``) included.

    Args:
        make: Makes an agent's entry on first use.
        on_stopped: Told ``(agent_id, settled)`` by an agent's actor once a run stopped.
    """

    def __init__(self, make: MakeAgent, on_stopped: Callable[[str, bool], None]) -> None:
        self._make = make
        self._on_stopped = on_stopped
        self._lock = threading.Lock()
        self._known: dict[str, KnownAgent] = {}
        self._restarting = False

    def get_or_make(self, agent_id: str) -> KnownAgent:
        """The agent's entry, made on first use.

        Raises:
            UnknownAgentError: the agent was never created (or has been deleted).
        """
        with self._lock:
            known = self._known.get(agent_id)
        if known is not None:
            return known
        made = self._make(agent_id, status=AgentStatus(), on_stopped=self._on_stopped)
        with self._lock:
            known = self._known.setdefault(agent_id, made)
            if known is made and self._restarting:
                made.status.hold_for_restart()
            return known

    def known(self, agent_id: str) -> KnownAgent | None:
        """The agent's entry, or None if it is not known now."""
        with self._lock:
            return self._known.get(agent_id)

    def forget(self, agent_id: str) -> None:
        """Drop the agent's entry (passivated, removed, or not resumed by a tier restart)."""
        with self._lock:
            self._known.pop(agent_id, None)

    def hold_all_for_restart(self) -> None:
        """The store writer failed: every agent, known now or made before the tier restarts,
        counts as busy until ``start_over_all``."""
        with self._lock:
            self._restarting = True
            for known in self._known.values():
                known.status.hold_for_restart()

    def start_over_all(self, owed: set[str]) -> set[str]:
        """The agent tier restarted: reset every known agent's status, counting one pending
        ``Start`` for each ``owed`` one (so none of its waiters sees a false idle). Returns
        the known agents that were counted so."""
        with self._lock:
            self._restarting = False
            known = list(self._known.values())
        for each in known:
            each.status.start_over(pending=int(each.agent_id in owed))
        return {each.agent_id for each in known if each.agent_id in owed}

    def close_all(self) -> None:
        """The system is stopping: fail every pending compaction and release every waiter
        (nothing will run again)."""
        with self._lock:
            known = list(self._known.values())
        for each in known:
            each.status.resolve_compactions("The agent system closed before the compaction ran.")
            each.status.start_over()
