"""What the loop core asks the actor shell to do: the effects ``AgentLoop.handle`` returns.

The core never performs I/O: it returns effects, the actor shell carries them out in order and
feeds the outcome back as events (:mod:`agentkeep.loop.events`). A ``Commit`` effect carries a
plan (:mod:`agentkeep.loop.plans`): plain data naming *what* must commit; the layer above the
loop and the store (:mod:`agentkeep.runtime.commit_plans`) runs it inside one store transaction.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import msgspec

# The lifecycle ids are defined with the plans that carry them; effects carry them too.
from agentkeep.loop.plans import LifecycleIds as LifecycleIds
from agentkeep.loop.plans import Plan
from agentkeep.types import Message, PermissionMode, Settings, StreamEvent, Tokens, ToolCallBlock
from agentkeep.types.records import QueueName, UserRecord


class _Data(msgspec.Struct, frozen=True, kw_only=True):
    pass


HookName: TypeAlias = Literal["before_turn", "after_turn", "after_agent_loop", "prepare_inference"]


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
    # What the calls' plain hooks and the tools are told: the loop, the turn, and the
    # request whose response asked for the calls (None for calls recovered by a load).
    ids: LifecycleIds = LifecycleIds()


class CancelTools(_Data, frozen=True):
    internal_ids: tuple[str, ...]


class StartCompaction(_Data, frozen=True):
    compaction_id: str
    messages: tuple[Message, ...]
    settings: Settings


class CancelCompaction(_Data, frozen=True):
    compaction_id: str


class StartTimer(_Data, frozen=True):
    """Tell the loop ``TimerFired(timer_id)`` after ``seconds`` (a retry's backoff, or the
    bound on how long a finished block is held); the wait must be cancellable
    (``CancelTimer``), never a sleep in the loop's thread."""

    timer_id: str
    seconds: float


class CancelTimer(_Data, frozen=True):
    timer_id: str


class Emit(_Data, frozen=True):
    """Forward a stream event (real or synthetic) to the ``on_event`` observers."""

    event: StreamEvent


ObserverName: TypeAlias = Literal[
    "before_agent_loop",
    "before_inference",
    "after_inference",
    "after_agent_settled",
    "message_accepted",
    "permission_mode_changed",
    "before_compaction",
    "after_compaction",
]


class Observe(_Data, frozen=True):
    """Run an observing hook; its failure is contained and never fails the run."""

    hook: ObserverName
    state: str | None = None  # after_inference: how the response ended
    tokens: Tokens | None = None
    error: str | None = None
    accepted: UserRecord | None = None  # message_accepted: the record, from ``queue``
    queue: QueueName | None = None
    # permission_mode_changed: the (previous, current) mode the consumption committed
    permission_change: tuple[PermissionMode, PermissionMode] | None = None
    ids: LifecycleIds = LifecycleIds()  # the lifecycle ids the hook is told


class RunHook(_Data, frozen=True):
    """Run an action hook; the shell answers with ``HookFinished``."""

    hook: HookName
    context_tokens: int | None = None
    aborted: bool = False
    drop_actions: bool = False  # after an abort: run it, but carry out none of its actions
    ids: LifecycleIds = LifecycleIds()  # the lifecycle ids the hook is told


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
    | StartTimer
    | CancelTimer
    | Emit
    | Observe
    | RunHook
    | CompactionResolved
    | LoopStopped
)
