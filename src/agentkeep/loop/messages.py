"""The loop core's vocabulary: the events it is fed and the effects it asks for.

The core never performs I/O: it returns effects, the actor shell carries them out and feeds
the outcome back as events. A ``Commit`` effect carries a plan (:mod:`agentkeep.loop.plans`):
plain data naming *what* must commit; the layer above the loop and the store
(:mod:`agentkeep.runtime.commit_plans`) runs it inside one store transaction.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import msgspec

from agentkeep.loop.plans import Appended, Consumed, Plan, Settled, Snapshot
from agentkeep.model import (
    CompactionOutcome,
    Message,
    QueuedMessage,
    QueuedNotice,
    QueueName,
    Settings,
    StreamEvent,
    SystemMessage,
    Tokens,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
    UserRecord,
)


class _Data(msgspec.Struct, frozen=True, kw_only=True):
    pass


# -- events --------------------------------------------------------------------------------


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


class AbortRequested(_Data, frozen=True):
    pass


class CompactRequested(_Data, frozen=True):
    pass


class ShutdownRequested(_Data, frozen=True):
    """Graceful shutdown: finish what is in flight, start nothing new, keep the owed fact."""


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


class ChildStopped(_Data, frozen=True):
    """A child that was abandoned (cancelled stream, aborted tool) has finished unwinding."""

    child_id: str


class CompactionFinished(_Data, frozen=True):
    compaction_id: str
    outcome: CompactionOutcome


class SteerAction(_Data, frozen=True):
    message: UserMessage | SystemMessage


class SendAction(_Data, frozen=True):
    message: UserMessage | SystemMessage


class CompactAction(_Data, frozen=True):
    pass


class InjectAction(_Data, frozen=True):
    message: SystemMessage


Action: TypeAlias = SteerAction | SendAction | CompactAction | InjectAction

HookName: TypeAlias = Literal["before_turn", "after_turn", "after_agent_loop"]


class HookFinished(_Data, frozen=True):
    hook: HookName
    compact: bool = False  # the hook's actions asked for a compaction


Event: TypeAlias = (
    Start
    | WorkAccepted
    | AbortRequested
    | CompactRequested
    | ShutdownRequested
    | Loaded
    | LoadFailed
    | CommitLanded
    | CommitFailed
    | StreamEventArrived
    | ToolFinished
    | ChildStopped
    | CompactionFinished
    | HookFinished
)

EVENT_TYPES: tuple[type, ...] = Event.__args__  # the union's members, for isinstance

# -- effects -------------------------------------------------------------------------------


class LoadState(_Data, frozen=True):
    """Read the durable state; ``records=False`` skips the conversation records (the core
    still gets their count, and asks again with ``records=True`` on any mismatch)."""

    records: bool = True


class Commit(_Data, frozen=True):
    plan: Plan


class StartInference(_Data, frozen=True):
    inference_id: str
    messages: tuple[Message, ...]  # the provider view of the conversation
    settings: Settings


class CancelInference(_Data, frozen=True):
    inference_id: str


class ToolRun(_Data, frozen=True):
    internal_id: str
    call: ToolCallBlock
    resumed: bool = False  # a call interrupted by a restart: only durable tools run again


class StartTools(_Data, frozen=True):
    runs: tuple[ToolRun, ...]


class CancelTools(_Data, frozen=True):
    internal_ids: tuple[str, ...]


class StartCompaction(_Data, frozen=True):
    compaction_id: str
    messages: tuple[Message, ...]
    settings: Settings


class CancelCompaction(_Data, frozen=True):
    compaction_id: str


class Emit(_Data, frozen=True):
    """Forward a stream event (real or synthetic) to the ``on_event`` observers."""

    event: StreamEvent


ObserverName: TypeAlias = Literal[
    "before_agent_loop",
    "before_inference",
    "after_inference",
    "after_agent_settled",
    "message_accepted",
]


class Observe(_Data, frozen=True):
    """Run an observing hook; its failure is contained and never fails the run."""

    hook: ObserverName
    state: str | None = None  # after_inference: how the response ended
    tokens: Tokens | None = None
    error: str | None = None
    accepted: UserRecord | None = None  # message_accepted: the record, from ``queue``
    queue: QueueName | None = None


class RunHook(_Data, frozen=True):
    """Run an action hook; the shell answers with ``HookFinished``."""

    hook: HookName
    context_tokens: int | None = None
    aborted: bool = False
    drop_actions: bool = False  # after an abort: run it, but carry out none of its actions


class CompactionResolved(_Data, frozen=True):
    error: str | None = None


class LoopStopped(_Data, frozen=True):
    """The run stopped. ``settled`` ⇒ it owes nothing (durably); otherwise the owed fact
    stays for a later start (shutdown, a blocked batch, input left after an abort)."""

    settled: bool
    error: str | None = None


Effect: TypeAlias = (
    LoadState
    | Commit
    | StartInference
    | CancelInference
    | StartTools
    | CancelTools
    | StartCompaction
    | CancelCompaction
    | Emit
    | Observe
    | RunHook
    | CompactionResolved
    | LoopStopped
)
