"""The ownership mutant of the server-fault campaign (:mod:`agentkeep.chaos.pg_server_faults`):
tests only, installed in a worker process by ``AGENTKEEP_CHAOS_MUTANT=reconnect_without_lock``.
"""

from __future__ import annotations

from typing import Any


def install_reconnect_without_lock_mutant() -> None:
    """The mutant: a dropped writer session is replaced without taking the lock again or
    checking the owner row, so a cut-off owner keeps writing (tests only)."""
    from agentkeep.persistence.postgres import session as owner_session
    from agentkeep.persistence.postgres.connection import connect

    def reconnect(self: Any) -> Any:
        self.close()
        self._adopt(connect(self.target, name=self.name))
        return self.connection

    owner_session.OwnerSession.reconnect = reconnect  # type: ignore[method-assign]
