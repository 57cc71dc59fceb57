"""Scale-out on PostgreSQL: which partitions of a store each worker process runs.

A **worker** is one process serving part of one store; a **partition** is one of a fixed
number of slices of the store's conversations, run by exactly one worker at a time (the
system that runs it holds the partition's advisory lock on its writer session). This
package keeps the membership (``agentkeep_workers``), spreads the partitions evenly over
the live workers, hands them over gracefully when workers join or leave, and takes over a
dead worker's partitions. It opens and shuts partitions through a small protocol
(:class:`PartitionRunner`, :class:`PartitionHandle`) and never holds a partition lock
itself. ``docs/scale-out.md`` describes the design and its failure model.
"""

from __future__ import annotations

from agentkeep.cluster.coordinator import Coordinator
from agentkeep.cluster.directory import Directory
from agentkeep.cluster.health import CoordinatorHealth
from agentkeep.cluster.membership import PartitionHolder, WorkerRow
from agentkeep.cluster.protocol import PartitionHandle, PartitionRunner
from agentkeep.cluster.settings import CoordinatorSettings
from agentkeep.cluster.spread import Plan, fair_share, plan, preferred_order, shares

__all__ = [
    "Coordinator",
    "CoordinatorHealth",
    "CoordinatorSettings",
    "Directory",
    "PartitionHandle",
    "PartitionHolder",
    "PartitionRunner",
    "Plan",
    "WorkerRow",
    "fair_share",
    "plan",
    "preferred_order",
    "shares",
]
