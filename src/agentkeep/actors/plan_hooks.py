"""The features' hooks that run inside a plan's transaction, on the store writer's thread:
the ``plan_ports.ConsumptionPolicy``, ``plan_ports.ToolCallHooks`` and
``plan_ports.LifecycleHooks`` of one agent's commits."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agentkeep.actors.hook_contexts import HookContexts
from agentkeep.actors.loop_thread import inside_loop
from agentkeep.features import (
    Feature,
    FeatureSet,
    HookContext,
    InferenceBoundary,
    InferenceInfo,
    MessageAccepted,
    MessageBoundary,
    ModelChange,
    NotificationBoundary,
    PermissionModeChange,
    TurnInfo,
)
from agentkeep.loop.effects import LifecycleIds
from agentkeep.loop.plans import LifecycleHook
from agentkeep.persistence.interface import Transaction
from agentkeep.providers.catalog import Providers
from agentkeep.providers.compatibility import needs_reset
from agentkeep.tools import ToolCallInfo
from agentkeep.types import (
    AssistantBlock,
    Settings,
    SystemMessage,
    ToolCallBlock,
    ToolResultMessage,
)
from agentkeep.types.records import OwedWork, PendingToolCall, QueuedMessage


class ConsumptionPolicy:
    """What one agent's consumptions need (``plan_ports.ConsumptionPolicy``): the providers' reset
    rule for switches, and the features' ``model_changed`` and ``message_accepted_transact``
    hooks, run inside the consumption transaction. Stateless: one per agent actor, and one
    per commit bound to the lifecycle ids its hooks are told (:meth:`with_ids`)."""

    def __init__(
        self,
        agent_id: str,
        *,
        providers: Providers,
        features: FeatureSet,
        contexts: HookContexts,
        ids: LifecycleIds | None = None,
    ) -> None:
        self._agent_id = agent_id
        self._providers = providers
        self._features = features
        self._contexts = contexts
        self._ids = ids

    def with_ids(self, ids: LifecycleIds) -> ConsumptionPolicy:
        """This policy, its hooks told ``ids``."""
        return ConsumptionPolicy(
            self._agent_id,
            providers=self._providers,
            features=self._features,
            contexts=self._contexts,
            ids=ids,
        )

    def needs_reset(self, previous: Settings, current: Settings) -> bool:
        """True if switching from ``previous`` to ``current`` must reset the provider's view."""
        return needs_reset(
            previous.provider, previous.model, current.provider, current.model, self._providers
        )

    def model_changed(
        self, tx: Transaction, previous: Settings, current: Settings, was_reset: bool
    ) -> SystemMessage | None:
        """Run the features' ``model_changed`` inside ``tx``; returns the handoff message a
        hook gave. Raises what a hook raised (the switch is rejected)."""
        change = ModelChange(previous=previous, current=current, was_reset=was_reset)

        def ctx_for(feature: Feature) -> HookContext:
            # It runs inside the consumption transaction: its stores and its sends join it.
            return self._contexts.for_feature(feature, current, tx=tx, ids=self._ids)

        return self._features.model_changed(ctx_for, change)

    def message_accepted(self, tx: Transaction, entry: QueuedMessage, settings: Settings) -> None:
        """Run the features' ``message_accepted_transact`` for ``entry`` inside ``tx``.
        Raises what a hook raised (the consumption rolls back)."""
        features = self._features
        if not features.overrides("message_accepted_transact"):
            return
        accepted = MessageAccepted(
            id=entry.id, kind=entry.queue, message=entry.message, metadata=entry.metadata
        )

        def ctx_for(feature: Feature) -> HookContext:
            return self._contexts.for_feature(feature, settings, tx=tx, ids=self._ids)

        with inside_loop(self._agent_id):  # a hook that waits on its own agent is refused
            features.transact("message_accepted_transact", ctx_for, accepted)

    def permission_mode_changed(
        self, tx: Transaction, previous: Settings, current: Settings
    ) -> None:
        """Run the features' ``permission_mode_changed_transact`` inside ``tx``. Raises what a
        hook raised (the consumption rolls back)."""
        features = self._features
        if not features.overrides("permission_mode_changed_transact"):
            return
        change = PermissionModeChange(
            previous=previous.permission_mode, current=current.permission_mode
        )

        def ctx_for(feature: Feature) -> HookContext:
            return self._contexts.for_feature(feature, current, tx=tx, ids=self._ids)

        with inside_loop(self._agent_id):  # a hook that waits on its own agent is refused
            features.transact("permission_mode_changed_transact", ctx_for, change)

    def observes_history_erasure(self) -> bool:
        """Whether any feature overrides ``history_erased_transact``."""
        return self._features.overrides("history_erased_transact")

    def history_erased(self, tx: Transaction) -> None:
        """Run the features' ``history_erased_transact`` inside a compaction's replacement
        transaction (its stores, the erased history KV included, join it). Raises what a
        hook raised (the compaction rolls back and fails)."""
        features = self._features
        if not features.overrides("history_erased_transact"):
            return
        # A compacted agent consumed a message, so its settings are durable.
        settings = tx.facts.read_settings(self._agent_id) or Settings()

        def ctx_for(feature: Feature) -> HookContext:
            return self._contexts.for_feature(feature, settings, tx=tx, ids=self._ids)

        with inside_loop(self._agent_id):  # a hook that waits on its own agent is refused
            features.transact("history_erased_transact", ctx_for)

    def call_requested(self, tx: Transaction, call: ToolCallBlock, settings: Settings) -> None:
        """Run the features' ``on_event_transact`` for the call a consumed tool request
        appended, inside ``tx``. Raises what a hook raised (the consumption rolls back)."""
        features = self._features
        if not features.overrides("on_event_transact"):
            return

        def ctx_for(feature: Feature) -> HookContext:
            return self._contexts.for_feature(feature, settings, tx=tx, ids=self._ids)

        with inside_loop(self._agent_id):  # a hook that waits on its own agent is refused
            features.transact("on_event_transact", ctx_for, call)

    def message_notices(
        self, tx: Transaction, entry: QueuedMessage, settings: Settings
    ) -> Sequence[SystemMessage]:
        """The features' ``system_notifications_transact`` notices at ``entry``'s message
        boundary, inside ``tx``. Raises what a hook raised (the consumption rolls back)."""
        accepted = MessageAccepted(
            id=entry.id, kind=entry.queue, message=entry.message, metadata=entry.metadata
        )
        return self._notifications(tx, MessageBoundary(accepted=accepted), settings, self._ids)

    def inference_notices(
        self, tx: Transaction, owed: OwedWork, settings: Settings
    ) -> Sequence[SystemMessage]:
        """The features' ``system_notifications_transact`` notices at the inference boundary
        of the request ``owed`` names, inside ``tx`` (the hooks are told its ids). Raises
        what a hook raised (the stage rolls back: no request)."""
        boundary = InferenceBoundary(
            loop_id=owed.loop_id, turn_id=owed.turn_id, inference_id=owed.inference_id
        )
        ids = LifecycleIds(
            loop_id=owed.loop_id, turn_id=owed.turn_id, inference_id=owed.inference_id
        )
        return self._notifications(tx, boundary, settings, ids)

    def _notifications(
        self,
        tx: Transaction,
        boundary: NotificationBoundary,
        settings: Settings,
        ids: LifecycleIds | None,
    ) -> Sequence[SystemMessage]:
        features = self._features
        if not features.overrides("system_notifications_transact"):
            return ()

        def ctx_for(feature: Feature) -> HookContext:
            return self._contexts.for_feature(feature, settings, tx=tx, ids=ids)

        with inside_loop(self._agent_id):  # a hook that waits on its own agent is refused
            return features.system_notifications(ctx_for, boundary)


class LifecycleHooks:
    """The features' transactional lifecycle hooks (``plan_ports.LifecycleHooks``): each
    runs inside the plan's transaction that carries it, its contexts bound to that
    transaction and told the ids the plan names; a failure propagates and rolls the plan
    back. One per agent actor; ``settings`` reads the agent's settings of the moment (the
    actor's thread waits on the commit while its hooks run)."""

    def __init__(
        self,
        agent_id: str,
        *,
        features: FeatureSet,
        contexts: HookContexts,
        settings: Callable[[], Settings],
    ) -> None:
        self._agent_id = agent_id
        self._features = features
        self._contexts = contexts
        self._settings = settings

    def _transact(self, tx: Transaction, hook: LifecycleHook, *args: Any) -> None:
        settings, ids = self._settings(), hook.ids

        def ctx_for(feature: Feature) -> HookContext:
            return self._contexts.for_feature(feature, settings, tx=tx, ids=ids)

        with inside_loop(self._agent_id):  # a hook that waits on its own agent is refused
            self._features.transact(hook.hook, ctx_for, *args)

    def run(self, tx: Transaction, hook: LifecycleHook) -> None:
        """Run ``hook`` with what its kind is told. Raises what a feature raised."""
        match hook.hook:
            case "before_turn_transact" | "after_turn_transact":
                turn = TurnInfo(context_tokens=hook.context_tokens, aborted=hook.aborted)
                self._transact(tx, hook, turn)
            case "after_inference_transact":
                info = InferenceInfo(state=hook.state, tokens=hook.tokens, error=hook.error)
                self._transact(tx, hook, info)
            case "after_agent_settled_transact":
                self._transact(tx, hook, hook.error)
            case "on_event_transact":
                raise ValueError("on_event_transact is told a block: LifecycleHooks.block")
            case _:
                self._transact(tx, hook)

    def block(self, tx: Transaction, hook: LifecycleHook, block: AssistantBlock) -> None:
        """Run ``on_event_transact`` for ``block``. Raises what a feature raised."""
        self._transact(tx, hook, block)


class ToolCallHooks:
    """The features' ``before/after_tool_call_transact`` (``plan_ports.ToolCallHooks``), run
    inside a plan's transaction with contexts bound to it; a failure propagates and rolls
    the plan back. One per commit: it carries the agent's settings of that moment."""

    def __init__(
        self,
        agent_id: str,
        *,
        features: FeatureSet,
        contexts: HookContexts,
        settings: Settings,
        ids: LifecycleIds | None = None,
    ) -> None:
        self._agent_id = agent_id
        self._features = features
        self._contexts = contexts
        self._settings = settings
        self._ids = ids

    def _run(self, hook: str, tx: Transaction, call: PendingToolCall, *args: Any) -> None:
        features = self._features
        if not features.overrides(hook):
            return
        info = ToolCallInfo(
            call_id=call.internal_id,
            call=call.call,
            requested=call.call,
            permission_mode=self._settings.permission_mode,
        )

        def ctx_for(feature: Feature) -> HookContext:
            return self._contexts.for_feature(
                feature, self._settings, tx=tx, call_id=call.internal_id, ids=self._ids
            )

        with inside_loop(self._agent_id):  # a hook that waits on its own agent is refused
            features.transact(hook, ctx_for, info, *args)

    def before_tool_call(self, tx: Transaction, call: PendingToolCall) -> None:
        """Run ``before_tool_call_transact`` for ``call`` inside the dispatch transaction.
        Raises what a hook raised."""
        self._run("before_tool_call_transact", tx, call)

    def after_tool_call(
        self, tx: Transaction, call: PendingToolCall, result: ToolResultMessage
    ) -> None:
        """Run ``after_tool_call_transact`` for ``call``'s result inside the transaction that
        appends it. Raises what a hook raised."""
        self._run("after_tool_call_transact", tx, call, result)
