"""``FaultInjection``: the testing hooks of ``AgentSystem.open`` (``testing=``).

Production code never sets them. The chaos campaigns (:mod:`agentkeep.chaos`, which
re-exports this class and :class:`~agentkeep.persistence.faults.FaultPlan`) and the tests use
them to make the store fail at a chosen operation or to open SQLite through a fault-injecting
VFS.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentkeep.persistence.faults import FaultPlan


@dataclass(frozen=True, kw_only=True)
class FaultInjection:
    """Testing hooks for ``AgentSystem.open(testing=...)``; never needed in production.

    Attributes:
        faults: Make the store fail (or kill the process) at a chosen operation.
        vfs: Open SQLite through this registered VFS (e.g. a power-loss simulator).
    """

    faults: FaultPlan | None = None
    vfs: str | None = None
