"""The one reader the surfaces (the daemon and its client) use beside the facade.

The daemon's async surfaces wait for a session's next commit on the event loop, holding no
thread: they watch the ledger's announcements (:meth:`SurfaceReader.watch`) and then read
through the facade (``AgentSystem.subscribe``, ``AgentSystem.sessions``), whose
:class:`Subscription` is the event stream they forward. :attr:`SurfaceReader.refusal` says
why the store refuses writes (the daemon answers 503). The client finds which process owns a
home in the store's lock file (:data:`LOCK_FILE`). Nothing else of the store is theirs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from agentkeep.errors import StoreError
from agentkeep.persistence.ledger import Subscription
from agentkeep.persistence.store import LOCK_NAME, Store

#: The store's lock file in a home: it names the owning process (docs/daemon.md).
LOCK_FILE: Final = LOCK_NAME


class SurfaceReader:
    """What the surfaces read of one system's store (see the module docstring); reach it as
    ``AgentSystem.internals.surfaces``."""

    def __init__(self, store: Store) -> None:
        self._store = store

    @property
    def refusal(self) -> StoreError | None:
        """Why the store refuses writes now (its writer failed for good), or None."""
        return self._store.refusal

    def watch(self, agent_id: str, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (from the committing thread) whenever the session's ledger
        moves: a commit or an ephemeral event. Returns the function that stops watching."""
        return self._store.ledger.watch(agent_id, callback)

    @property
    def closed(self) -> bool:
        """True once the store closed: nothing more will be announced."""
        return self._store.ledger.closed


__all__ = ["LOCK_FILE", "Subscription", "SurfaceReader"]
