"""How the agent actor runs its features' loop hooks: the observing ones (``Observe``, the
``on_event`` of every emitted event) and the deciding ones (``RunHook``: actions, compaction,
``prepare_inference``). :class:`AgentHooks` is a part the actor owns.

Invariants kept: a hook no feature overrides is neither built nor run (its outcome is the one
running it would have: no actions, no compaction); every hook runs inside its agent's loop
(``inside_loop``: a hook waiting on its own agent is refused); the actions of a hook whose
abort fired before or while it ran are dropped; one decision's messages commit as one batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from agentkeep.actors.hook_actions import accept_hook_actions
from agentkeep.actors.hook_contexts import HookContexts
from agentkeep.actors.loop_thread import inside_loop
from agentkeep.actors.status import AgentStatus
from agentkeep.actors.turn_spans import TurnSpans
from agentkeep.features import (
    FeatureSet,
    HookContext,
    InferenceInfo,
    MessageAccepted,
    PermissionModeChange,
    TurnInfo,
)
from agentkeep.logs import get_logger
from agentkeep.loop.actions import CompactAction
from agentkeep.loop.effects import LifecycleIds, Observe, RunHook
from agentkeep.loop.events import Event, HookFinished
from agentkeep.persistence.interface import StoreHandle
from agentkeep.types import Settings

log = get_logger(__name__)


class AgentHooks:
    """One agent's loop hooks over the system's features (see the module).

    Args:
        agent_id: The agent.
        features: The system's features.
        contexts: The agent's hook contexts.
        settings: The loop's current settings (read when a context is built).
        status: The agent's status (an abort pending drops a hook's actions).
        store: Where a hook's actions are accepted.
        spans: The run's spans (turns start and end with their hooks).
        new_id: Makes the ids of a hook's accepted messages.
    """

    def __init__(
        self,
        agent_id: str,
        *,
        features: FeatureSet,
        contexts: HookContexts,
        settings: Callable[[], Settings],
        status: AgentStatus,
        store: StoreHandle,
        spans: TurnSpans,
        new_id: Callable[[], str],
    ) -> None:
        self._agent_id = agent_id
        self._features = features
        self._contexts = contexts
        self._settings = settings
        self._status = status
        self._store = store
        self._spans = spans
        self._new_id = new_id
        # A system's features are fixed: whether any observes the loop's events, asked once.
        self.observes_events = features.overrides("on_event")

    def ctx_for(self, feature: Any) -> HookContext:
        """The context a hook of ``feature`` is called with now."""
        return self._contexts.for_feature(feature, self._settings())

    def _ctx_told(self, ids: LifecycleIds) -> Callable[[Any], HookContext]:
        """Contexts for a lifecycle hook: told the ids the effect that asked for it carries."""
        return lambda feature: self._contexts.for_feature(feature, self._settings(), ids=ids)

    def on_event(self, event: Any) -> None:
        """Every feature's ``on_event`` for an emitted event (isolated per feature)."""
        with inside_loop(self._agent_id):  # waiting on its own agent is refused
            self._features.observe("on_event", self.ctx_for, event)

    def observe(self, effect: Observe) -> None:
        """An observing hook (after the fact; a failure is logged, never fails the run)."""
        if not self._features.overrides(effect.hook):
            return  # no feature observes it: nothing to build or run
        with inside_loop(self._agent_id):  # a hook that waits on its own agent is refused
            self._observe_inside(effect)

    def _observe_inside(self, effect: Observe) -> None:
        features = self._features
        ctx_for = self._ctx_told(effect.ids)
        match effect.hook:
            case "after_inference":
                info = InferenceInfo(state=effect.state, tokens=effect.tokens, error=effect.error)
                features.observe("after_inference", ctx_for, info)
            case "after_agent_settled":
                features.observe("after_agent_settled", ctx_for, effect.error)
            case "message_accepted":
                record, queue = effect.accepted, effect.queue
                if record is not None and queue is not None:
                    accepted = MessageAccepted(
                        id=record.message_id,
                        kind=queue,
                        message=record.message,
                        metadata=record.metadata,
                    )
                    features.observe("message_accepted", ctx_for, accepted)
            case "permission_mode_changed":
                if effect.permission_change is not None:
                    previous, current = effect.permission_change
                    change = PermissionModeChange(previous=previous, current=current)
                    features.observe("permission_mode_changed", ctx_for, change)
            case hook:
                features.observe(hook, ctx_for, *())

    def run(self, effect: RunHook) -> list[Event]:
        """A deciding hook: its accepted actions' events, then ``HookFinished``."""
        if effect.hook == "before_turn":
            self._spans.turn_started(effect.ids)
        elif effect.hook == "after_turn":
            try:
                return self._run_inside(effect)
            finally:
                self._spans.turn_ended(aborted=effect.aborted)
        return self._run_inside(effect)

    def _run_inside(self, effect: RunHook) -> list[Event]:
        features = self._features
        if not features.overrides(effect.hook):
            # No feature overrides it: it decides nothing (no actions, no compaction), so
            # nothing is built or run — the same outcome as running it.
            return [HookFinished(hook=effect.hook)]
        ctx_for = self._ctx_told(effect.ids)
        if effect.hook == "prepare_inference":
            return [self._prepare_inference(effect, ctx_for)]
        with inside_loop(self._agent_id):
            if effect.hook == "after_agent_loop":
                actions = features.actions("after_agent_loop", ctx_for)
            else:
                turn = TurnInfo(context_tokens=effect.context_tokens, aborted=effect.aborted)
                actions = features.actions(effect.hook, ctx_for, turn)
        if effect.drop_actions or self._status.abort_pending:
            # The abort fired before or while the hook ran: its actions are dropped.
            return [HookFinished(hook=effect.hook)]
        compact = any(isinstance(a, CompactAction) for a in actions)
        follow: list[Event] = []
        try:
            # One decision's messages commit as one batch, so a caller arriving during it
            # lands before or after all of it (invariant I2).
            follow = list(
                accept_hook_actions(self._store, self._agent_id, actions, new_id=self._new_id)
            )
        except Exception as error:  # a failing action never fails the run
            log.warning("hook_actions_failed", hook=effect.hook, error=repr(error))
        return [*follow, HookFinished(hook=effect.hook, compact=compact)]

    def _prepare_inference(
        self, effect: RunHook, ctx_for: Callable[[Any], HookContext]
    ) -> HookFinished:
        """Run the features' ``prepare_inference`` (told the last measurement): whether
        any asks to compact before the coming request (dropped once an abort fired)."""
        with inside_loop(self._agent_id):
            compact = self._features.prepare_inference(_measured(ctx_for, effect.context_tokens))
        if effect.drop_actions or self._status.abort_pending:
            compact = False
        return HookFinished(hook="prepare_inference", compact=compact)


def _measured(
    ctx_for: Callable[[Any], HookContext], tokens: int | None
) -> Callable[[Any], HookContext]:
    """``ctx_for``, its contexts carrying the measured context size ``tokens``."""
    return lambda feature: dataclasses.replace(ctx_for(feature), context_tokens=tokens)
