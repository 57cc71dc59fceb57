"""The root of an AgentSystem's supervision tree::

    system (rest_for_one)
    ├── store_writer      the single writing connection (Store.start_writer)
    ├── agents (one_for_one)
    │   └── <agent id> ... one AgentActor per agent with work (transient)
    └── drivers (one_for_one, when given)
        └── <session id>#<n> ... one DriverRunner per session with injected-driver turns

``rest_for_one``: when the store writer fails, everything started after it (the agent tier)
is stopped, the writer restarts on a fresh connection, and the agent tier starts again and
resumes every agent that owes work from the store, the same path a process restart takes.
When the agents supervisor gives up (a failure storm among agents), only the tier restarts.
Past the system's own intensity the root gives up: it stops both children (the durable state
stays) and ``on_give_up`` surfaces the error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pykka

from agentkeep.actors.agent_tier import AgentTier
from agentkeep.actors.supervisor import (
    Backoff,
    ChildSpec,
    RestartIntensity,
    SupervisorGaveUpError,
    SupervisorRef,
    start_supervisor,
)
from agentkeep.persistence.store import Store

_WRITER_SHUTDOWN_SECONDS = 60.0


def start_system_tree(
    store: Store,
    agents: AgentTier,
    *,
    intensity: RestartIntensity,
    backoff: Backoff,
    on_give_up: Callable[[SupervisorGaveUpError], None],
    drivers: Callable[[], pykka.ActorRef[Any]] | None = None,
) -> SupervisorRef:
    """Start the tree over ``store`` (opened with ``start_writer=False``) and ``agents``;
    ``drivers`` starts the injected drivers' tier (last: stopped first, restarted with the
    writer).

    Raises:
        ChildStartError: the writer or the agent tier could not start.
    """
    return start_supervisor(
        "system",
        strategy="rest_for_one",
        children=[
            # permanent: the writer never stops on its own; any exit is a failure to repair.
            ChildSpec(
                id="store_writer",
                start=store.start_writer,
                shutdown_timeout_seconds=_WRITER_SHUTDOWN_SECONDS,
            ),
            # No shutdown timeout: the tier stops its agents, each bounded by its own turn.
            ChildSpec(id="agents", start=agents.start_tier, shutdown_timeout_seconds=None),
            *(
                []
                if drivers is None
                else [ChildSpec(id="drivers", start=drivers, shutdown_timeout_seconds=None)]
            ),
        ],
        intensity=intensity,
        backoff=backoff,
        on_give_up=on_give_up,
    )
