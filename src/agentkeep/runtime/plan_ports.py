"""What executing a plan asks of its caller (:mod:`agentkeep.runtime.commit_plans`): the
consumption policy (the providers' reset rule and the features' consumption hooks), the
tool-call hooks and the lifecycle hooks that run inside a plan's transaction, each with its
do-nothing implementation (what a plan runs with when no feature overrides anything).

Every method runs inside the plan's transaction, in the writer's thread; raising rolls the
whole plan back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from agentkeep.loop.plans import (
    LifecycleHook,
)
from agentkeep.persistence.interface import Transaction
from agentkeep.types import (
    AssistantBlock,
    Settings,
    SystemMessage,
    ToolCallBlock,
    ToolResultMessage,
)
from agentkeep.types.records import (
    OwedWork,
    PendingToolCall,
    QueuedMessage,
)


class ConsumptionPolicy(Protocol):
    """What a consumption needs from the system: the reset rule for provider/model switches
    and the features' hooks that run inside the consumption transaction."""

    def needs_reset(self, previous: Settings, current: Settings) -> bool:
        """True if the change is incompatible and the history must be erased."""
        ...

    def model_changed(
        self, tx: Transaction, previous: Settings, current: Settings, was_reset: bool
    ) -> SystemMessage | None:
        """Run the ``model_changed`` hook inside the consumption transaction; it may return
        the handoff message that opens a reset context. Raising rejects an incompatible
        switch (the message is still consumed under the previous selection)."""
        ...

    def message_accepted(self, tx: Transaction, entry: QueuedMessage, settings: Settings) -> None:
        """Run ``message_accepted_transact`` for ``entry`` as it enters the conversation,
        inside the consumption transaction; raising rolls the consumption back."""
        ...

    def permission_mode_changed(
        self, tx: Transaction, previous: Settings, current: Settings
    ) -> None:
        """Run ``permission_mode_changed_transact`` for a consumption that changes the
        permission mode, inside its transaction; raising rolls the consumption back."""
        ...

    def observes_history_erasure(self) -> bool:
        """Whether :meth:`history_erased` runs any hook (else the compaction replaces its
        records in one step)."""
        ...

    def history_erased(self, tx: Transaction) -> None:
        """Run ``history_erased_transact`` inside a compaction's replacement transaction,
        after the old records and the history KV were erased and before the replacement is
        appended; raising rolls the compaction back."""
        ...

    def message_notices(
        self, tx: Transaction, entry: QueuedMessage, settings: Settings
    ) -> Sequence[SystemMessage]:
        """The notices to append right before ``entry``'s record (its message boundary:
        after any reset its consumption causes), inside the consumption transaction;
        raising rolls the consumption back."""
        ...

    def inference_notices(
        self, tx: Transaction, owed: OwedWork, settings: Settings
    ) -> Sequence[SystemMessage]:
        """The notices to append right before the request ``owed`` names (its inference
        boundary), inside the inference stage's opening transaction; raising rolls the
        stage back (no request is made)."""
        ...

    def call_requested(self, tx: Transaction, call: ToolCallBlock, settings: Settings) -> None:
        """Run ``on_event_transact`` for the assistant call a consumed tool request appended,
        inside the consumption transaction (after the message's acceptance hooks); raising
        rolls the consumption back."""
        ...


class KeepEverything:
    """A consumption policy for callers without a registry or features: never reset, no
    hooks."""

    def needs_reset(self, previous: Settings, current: Settings) -> bool:
        return False

    def model_changed(
        self, tx: Transaction, previous: Settings, current: Settings, was_reset: bool
    ) -> SystemMessage | None:
        return None

    def message_accepted(self, tx: Transaction, entry: QueuedMessage, settings: Settings) -> None:
        return None

    def permission_mode_changed(
        self, tx: Transaction, previous: Settings, current: Settings
    ) -> None:
        return None

    def observes_history_erasure(self) -> bool:
        return False

    def history_erased(self, tx: Transaction) -> None:
        return None

    def message_notices(
        self, tx: Transaction, entry: QueuedMessage, settings: Settings
    ) -> Sequence[SystemMessage]:
        return ()

    def inference_notices(
        self, tx: Transaction, owed: OwedWork, settings: Settings
    ) -> Sequence[SystemMessage]:
        return ()

    def call_requested(self, tx: Transaction, call: ToolCallBlock, settings: Settings) -> None:
        return None


class ToolCallHooks(Protocol):
    """The features' transactional tool-call hooks, run inside a plan's transaction.
    Raising rolls the whole plan back (``agentkeep.tools.hooks``)."""

    def before_tool_call(self, tx: Transaction, call: PendingToolCall) -> None:
        """Once per call of a freshly dispatched batch, inside the dispatch transaction."""
        ...

    def after_tool_call(
        self, tx: Transaction, call: PendingToolCall, result: ToolResultMessage
    ) -> None:
        """Inside the transaction that appends a call's (winning) result — a dispatched
        call's, or the error answering one that never ran (``AnswerCalls``)."""
        ...


class NoToolCallHooks:
    """Tool-call hooks for callers without features: nothing runs."""

    def before_tool_call(self, tx: Transaction, call: PendingToolCall) -> None:
        return None

    def after_tool_call(
        self, tx: Transaction, call: PendingToolCall, result: ToolResultMessage
    ) -> None:
        return None


NO_TOOL_CALL_HOOKS = NoToolCallHooks()


class LifecycleHooks(Protocol):
    """The features' transactional lifecycle hooks a plan carries (``LifecycleHook``), run
    inside its transaction after the plan's own writes. Raising rolls the whole plan back."""

    def run(self, tx: Transaction, hook: LifecycleHook) -> None:
        """Run ``hook`` (any but ``on_event_transact``) inside ``tx``."""
        ...

    def block(self, tx: Transaction, hook: LifecycleHook, block: AssistantBlock) -> None:
        """Run ``on_event_transact`` for ``block``, which ``tx`` appends."""
        ...


class NoLifecycleHooks:
    """Lifecycle hooks for callers without features: nothing runs."""

    def run(self, tx: Transaction, hook: LifecycleHook) -> None:
        return None

    def block(self, tx: Transaction, hook: LifecycleHook, block: AssistantBlock) -> None:
        return None


NO_LIFECYCLE_HOOKS = NoLifecycleHooks()
