"""Seeded chaos campaigns: break the runtime on purpose and check that durable state keeps
its promises.

A campaign runs in a :class:`ChaosWorld`: a state directory that outlives each simulated
process, a store that dies (``crash``) or hiccups (``flaky``) at a seeded operation, the
:class:`~agentkeep.providers.RespondingModel` (which answers from the conversation, so a
restarted agent hears what its dead predecessor heard; as a :class:`BatchingModel` it asks for
batches of 1–3 calls), tools that refuse to run for a dead process, record every execution in
a :class:`Ledger` and finish in a seeded order (:class:`CompletionOrder`, so a later call of a
batch often finishes first), and a :class:`Checker` that reads only durable state and the
ledger. The suites (docs/chaos.md) are in :data:`SUITES`::

    from agentkeep import chaos

    result = chaos.SUITES["crash_recovery"](seed=7)
    assert result.ok, result.describe()

Embedders hand the world their own tools (wrapped per process by :func:`guard_tool`) and
features, and drive it with :meth:`ChaosWorld.run_process`. ``CHAOS_SEEDS=N`` sets how many
seeds the runner plays, ``CHAOS_SEED=S`` replays one; ``python -m agentkeep.chaos SUITE
--seeds N`` runs a sweep from the command line.
"""

from agentkeep.chaos.batches import BatchingModel, CompletionOrder
from agentkeep.chaos.campaigns import (
    SUITES,
    CampaignResult,
    first_caught,
    replay_command,
    run_suite,
    seeds_from_env,
)
from agentkeep.chaos.checker import INVARIANTS, Checker, SwitchExpectation, Violation
from agentkeep.chaos.tools import (
    CallArgs,
    Ledger,
    LedgerEntry,
    ZombieToolError,
    guard_tool,
    ledger_tools,
)
from agentkeep.chaos.world import (
    ChaosWorld,
    DurableState,
    Offer,
    ProcessHandle,
    ProcessReport,
    batching_providers,
    default_providers,
    read_durable,
)
from agentkeep.fault_injection import FaultInjection
from agentkeep.persistence.faults import FaultPlan

__all__ = [
    "INVARIANTS",
    "SUITES",
    "BatchingModel",
    "CallArgs",
    "CampaignResult",
    "ChaosWorld",
    "Checker",
    "CompletionOrder",
    "DurableState",
    "FaultInjection",
    "FaultPlan",
    "Ledger",
    "LedgerEntry",
    "Offer",
    "ProcessHandle",
    "ProcessReport",
    "SwitchExpectation",
    "Violation",
    "ZombieToolError",
    "batching_providers",
    "default_providers",
    "first_caught",
    "guard_tool",
    "ledger_tools",
    "read_durable",
    "replay_command",
    "run_suite",
    "seeds_from_env",
]
