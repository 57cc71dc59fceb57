"""What an agent actor needs from its system, in one place: the store, the providers, the
features and tools, and the ways back into the system (acceptance, references)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from agentkeep.actors.sessions import SessionSlot
from agentkeep.actors.status import AgentStatus
from agentkeep.delivery import accept_message, accept_notice
from agentkeep.features import Feature, FeatureSet, HookContext, MessageAccepted, ModelChange
from agentkeep.loop.messages import Action, InjectAction, SendAction, SteerAction, WorkAccepted
from agentkeep.loop.plans import QueueMode
from agentkeep.model import (
    MessageOptions,
    PendingToolCall,
    QueuedMessage,
    Settings,
    SystemMessage,
    ToolResultMessage,
    new_id,
)
from agentkeep.persistence.interface import StoreHandle, Transaction
from agentkeep.persistence.kv import ScopedKV
from agentkeep.providers.compatibility import needs_reset
from agentkeep.providers.registry import Providers
from agentkeep.refs import AgentSystemRef
from agentkeep.runtime.commit_plans import CALL_AREA, KV_AREA, RUN_AREA
from agentkeep.tool_hooks import ToolCallInfo
from agentkeep.tools import Tool

_inside = threading.local()

# The default grace of a cancelled child: long enough for a tool or stream that checks its
# cancel token to return, short enough that one that ignores it holds nobody up for long.
CHILD_GRACE_SECONDS = 1.0


def current_loop_agent() -> str | None:
    """The id of the agent whose loop the calling thread is running in (a hook or a tool)."""
    return getattr(_inside, "agent_id", None)


@dataclass(kw_only=True)
class AgentServices:
    agent_id: str
    store: StoreHandle
    providers: Providers
    features: FeatureSet
    instructions: str
    tools: Sequence[Tool[Any, Any]]
    defaults: Settings
    steering_mode: QueueMode
    send_mode: QueueMode
    system_ref: AgentSystemRef
    config: dict[str, Any] = field(default_factory=dict)
    new_id: Callable[[], str] = new_id
    status: AgentStatus = field(default_factory=AgentStatus)
    # Told (agent_id, settled) after a run stopped and the status says so (passivation).
    on_stopped: Callable[[str, bool], None] | None = None
    # How long a cancelled child (an aborted tool call, or any child of a stopping agent)
    # may take to unwind before it is abandoned (``AgentChildren``).
    child_grace_seconds: float = field(default_factory=lambda: CHILD_GRACE_SECONDS)

    def new_session_slot(self) -> SessionSlot:
        """A session slot for one actor incarnation (each closes only its own session)."""
        return SessionSlot(self.agent_id, self.providers)

    @contextmanager
    def inside_loop(self) -> Iterator[None]:
        """Mark the calling thread as running inside this agent's loop (hooks and tools), so
        waiting on this agent from here is refused instead of deadlocking (invariant 20)."""
        previous = getattr(_inside, "agent_id", None)
        _inside.agent_id = self.agent_id
        try:
            yield
        finally:
            _inside.agent_id = previous

    # -- stores ------------------------------------------------------------------------------

    def hook_context(
        self,
        feature: Feature,
        settings: Settings,
        *,
        tx: Transaction | None = None,
        call_id: str | None = None,
        alive: Callable[[], bool] | None = None,
    ) -> HookContext:
        """A feature's context. With ``tx`` (a transactional hook) every store is bound to
        that transaction; with ``call_id`` (a tool-call hook) it has the call's store, which
        refuses use once ``alive()`` is False."""
        name = feature.name

        def scope(*segments: str) -> ScopedKV:
            if tx is not None:
                return ScopedKV.in_transaction(tx, *segments)
            return ScopedKV.through(self.store, *segments)

        call_kv = None
        if call_id is not None:
            call_kv = scope("agent", self.agent_id, CALL_AREA, call_id, "feature", name)
            if alive is not None:
                call_kv = call_kv.until(alive)
        return HookContext(
            agent_id=self.agent_id,
            settings=settings,
            config=self.config,
            kv=scope("agent", self.agent_id, KV_AREA, "feature", name),
            run_kv=scope("agent", self.agent_id, RUN_AREA, "feature", name),
            shared_kv=scope("system", "feature", name),
            call_kv=call_kv,
            # Inside a transaction, sends and steers join it (told to the agent after commit).
            system=self.system_ref if tx is None else self.system_ref.within(tx),
        )

    def call_kv(self, internal_id: str, alive: Callable[[], bool]) -> ScopedKV:
        """The store of one tool call; it refuses use once ``alive()`` is False (the call
        returned), so a retained handle can never write behind its result (invariant 25)."""
        scope = ScopedKV.through(self.store, "agent", self.agent_id, CALL_AREA, internal_id)
        return scope.until(alive)

    # -- switches ----------------------------------------------------------------------------

    def consumption_policy(self) -> _ConsumptionPolicy:
        return _ConsumptionPolicy(self)

    def tool_call_hooks(self, settings: Settings) -> _ToolCallHooks:
        """The transactional tool-call hooks, for one commit (``plans.ToolCallHooks``)."""
        return _ToolCallHooks(self, settings)

    # -- acceptance from inside the loop (hook actions) --------------------------------------

    def accept_actions_from_loop(self, actions: Sequence[Action]) -> list[WorkAccepted]:
        """Accept a hook decision's steer/send/inject actions in one transaction."""
        writes = [a for a in actions if isinstance(a, SteerAction | SendAction | InjectAction)]
        if not writes:
            return []

        def work(tx: Transaction) -> list[WorkAccepted]:
            accepted: list[WorkAccepted] = []
            for action in writes:
                if isinstance(action, InjectAction):
                    accepted.append(
                        WorkAccepted(notice=accept_notice(tx, self.agent_id, action.message))
                    )
                    continue
                _, queued = accept_message(
                    tx,
                    self.agent_id,
                    queue="steering" if isinstance(action, SteerAction) else "send",
                    message=action.message,
                    message_id=self.new_id(),
                    options=MessageOptions(),
                    metadata=None,
                )
                if queued is not None:
                    accepted.append(WorkAccepted(message=queued))
            return accepted

        return self.store.transact(work)


class _ConsumptionPolicy:
    """What one consumption needs: the registry's reset rule for switches, and the features'
    ``model_changed`` and ``message_accepted_transact`` hooks, run inside its transaction."""

    def __init__(self, services: AgentServices) -> None:
        self._s = services

    def needs_reset(self, previous: Settings, current: Settings) -> bool:
        return needs_reset(
            previous.provider, previous.model, current.provider, current.model, self._s.providers
        )

    def model_changed(
        self, tx: Transaction, previous: Settings, current: Settings, was_reset: bool
    ) -> SystemMessage | None:
        change = ModelChange(previous=previous, current=current, was_reset=was_reset)

        def ctx_for(feature: Feature) -> HookContext:
            # It runs inside the consumption transaction: its stores and its sends join it.
            return self._s.hook_context(feature, current, tx=tx)

        return self._s.features.model_changed(ctx_for, change)

    def message_accepted(self, tx: Transaction, entry: QueuedMessage, settings: Settings) -> None:
        features = self._s.features
        if not features.overrides("message_accepted_transact"):
            return
        accepted = MessageAccepted(
            id=entry.id, kind=entry.queue, message=entry.message, metadata=entry.metadata
        )

        def ctx_for(feature: Feature) -> HookContext:
            return self._s.hook_context(feature, settings, tx=tx)

        with self._s.inside_loop():  # a hook that waits on its own agent is refused
            features.transact("message_accepted_transact", ctx_for, accepted)


class _ToolCallHooks:
    """The features' ``before/after_tool_call_transact``, run inside a plan's transaction
    with contexts bound to it; a failure propagates and rolls the plan back."""

    def __init__(self, services: AgentServices, settings: Settings) -> None:
        self._s = services
        self._settings = settings

    def _run(self, hook: str, tx: Transaction, call: PendingToolCall, *args: Any) -> None:
        features = self._s.features
        if not features.overrides(hook):
            return
        info = ToolCallInfo(call_id=call.internal_id, call=call.call, requested=call.call)

        def ctx_for(feature: Feature) -> HookContext:
            return self._s.hook_context(feature, self._settings, tx=tx, call_id=call.internal_id)

        with self._s.inside_loop():  # a hook that waits on its own agent is refused
            features.transact(hook, ctx_for, info, *args)

    def before_tool_call(self, tx: Transaction, call: PendingToolCall) -> None:
        self._run("before_tool_call_transact", tx, call)

    def after_tool_call(
        self, tx: Transaction, call: PendingToolCall, result: ToolResultMessage
    ) -> None:
        self._run("after_tool_call_transact", tx, call, result)
