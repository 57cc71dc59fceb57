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
from pathlib import Path
from typing import Final

from agentkeep.errors import StoreError
from agentkeep.persistence.ledger import Subscription
from agentkeep.persistence.lock import StoreLock
from agentkeep.persistence.store import LOCK_NAME, Store, acquire_lock, prepare_directory

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


def hold_home(home: Path) -> StoreLock:
    """Take ``home``'s lock file (:data:`LOCK_FILE`) for this process until ``release()``:
    for a worker, which owns its state directory (daemon file, token, providers) while each
    of its partitions' systems owns only a part of the store. The client finds the daemon of
    a home by the pid in this file, and a second process serving the same home is refused.

    Raises:
        StoreLockedError: another process holds it (naming its pid).
        StoreDirectoryError: this user cannot create or write the directory.
    """
    prepare_directory(home)  # created private, as a store's own directory is
    return acquire_lock(home, home)


__all__ = ["LOCK_FILE", "Subscription", "SurfaceReader", "hold_home"]
