"""What the actor shell tells the loop core: the events ``AgentLoop.handle`` is fed.

Each event reports something that happened outside the core: a caller's request, a durable
acceptance, the outcome of an effect the core asked for (a load, a commit, a stream event, a
tool result, a compaction, a hook). The core answers each with effects
(:mod:`agentkeep.loop.effects`).
"""

from __future__ import annotations

from typing import TypeAlias

import msgspec

from agentkeep.loop.effects import HookName
from agentkeep.loop.plans import Appended, Consumed, ConsumeQueue, Plan, Settled, Snapshot
from agentkeep.types import CompactionOutcome, StreamEvent, ToolResultMessage
from agentkeep.types.records import QueuedMessage, QueuedNotice


class _Data(msgspec.Struct, frozen=True, kw_only=True):
    pass


class Start(_Data, frozen=True):
    """Begin (or continue) whatever the durable state owes.

    ``explicit``: a caller named this agent (``system.start(agent_id)``): a trailing question
    is answered even if this instance already looked (e.g. one an abort left unanswered).
    """

    explicit: bool = False


class WorkAccepted(_Data, frozen=True):
    """A message or notice was durably accepted for this agent (outside the loop)."""

    message: QueuedMessage | None = None
    notice: QueuedNotice | None = None


class ConsumedAtAcceptance(_Data, frozen=True):
    """A message was accepted and consumed in one transaction, taking this idle loop's
    ``ConsumeOffer`` (``loop.offers``): ``plan`` is the offer's plan for its queue, ``value``
    what it committed. The run starts from there, without a reload or a consumption commit.
    """

    plan: ConsumeQueue
    value: Consumed


class AcceptanceOutcomeUnknown(_Data, frozen=True):
    """An acceptance that took this loop's offer got an unknown commit outcome: it may have
    consumed the message. Nothing remembered is trusted; a ``Start`` follows."""


class AbortRequested(_Data, frozen=True):
    pass


class CompactRequested(_Data, frozen=True):
    pass


class ShutdownRequested(_Data, frozen=True):
    """Graceful shutdown: finish what is in flight, start nothing new, keep the owed fact."""


class StopRetrying(_Data, frozen=True):
    """The system is closing: a failure from now on is not retried, and a retry's backoff
    under way ends the run with the owed fact kept."""


class ProviderRemoved(_Data, frozen=True):
    """The provider ``provider_id`` was removed from the registry, or a request found it
    unregistered (provider disablement): a run against it stops retrying."""

    provider_id: str


class TimerFired(_Data, frozen=True):
    """A ``StartTimer`` wait ended."""

    timer_id: str


class Loaded(_Data, frozen=True):
    snapshot: Snapshot


class LoadFailed(_Data, frozen=True):
    message: str


class CommitLanded(_Data, frozen=True):
    plan: Plan
    value: Consumed | Appended | Settled | None = None


class CommitFailed(_Data, frozen=True):
    """A commit did not land — or, with ``outcome_unknown``, may have landed (an error from
    COMMIT itself): then nothing the core remembers can be trusted."""

    plan: Plan
    message: str
    outcome_unknown: bool = False


class StreamEventArrived(_Data, frozen=True):
    inference_id: str
    event: StreamEvent


class ToolFinished(_Data, frozen=True):
    internal_id: str
    result: ToolResultMessage


class ToolLifetimes(_Data, frozen=True):
    """Which of the calls just started run tools with lifetime flags (told by the runtime,
    which knows the tools, right after ``StartTools``): ``steerable`` calls are interrupted
    by newly accepted steering and by a drain, ``reloadable`` ones are left pending by a
    drain."""

    steerable: tuple[str, ...] = ()
    reloadable: tuple[str, ...] = ()


class ChildStopped(_Data, frozen=True):
    """A child that was abandoned (cancelled stream, aborted tool) has finished unwinding."""

    child_id: str


class CompactionFinished(_Data, frozen=True):
    compaction_id: str
    outcome: CompactionOutcome


class HookFinished(_Data, frozen=True):
    hook: HookName
    compact: bool = False  # the hook's actions asked for a compaction


Event: TypeAlias = (
    Start
    | WorkAccepted
    | ConsumedAtAcceptance
    | AcceptanceOutcomeUnknown
    | AbortRequested
    | CompactRequested
    | ShutdownRequested
    | StopRetrying
    | ProviderRemoved
    | TimerFired
    | Loaded
    | LoadFailed
    | CommitLanded
    | CommitFailed
    | StreamEventArrived
    | ToolFinished
    | ToolLifetimes
    | ChildStopped
    | CompactionFinished
    | HookFinished
)

EVENT_TYPES: tuple[type, ...] = Event.__args__  # the union's members, for isinstance
