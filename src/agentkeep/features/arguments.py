"""What feature hooks are handed: the :class:`HookContext` every hook receives, and the
value each kind of hook is told about (a turn, a response, an accepted message, a change).

Import them from :mod:`agentkeep.features` (or from ``agentkeep``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal, TypeAlias, TypeVar

from agentkeep.errors import AgentkeepError
from agentkeep.key_value import KeyValueStore
from agentkeep.refs import AgentSystemRef
from agentkeep.registry.types import Resources
from agentkeep.system_transaction import SystemTransaction
from agentkeep.types import (
    JSONObject,
    PermissionMode,
    QueueableMessage,
    ReasoningEffort,
    ServiceTier,
    Settings,
    Tokens,
)
from agentkeep.types.records import QueueName

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class TurnInfo:
    """What ``before_turn``/``after_turn`` are told."""

    context_tokens: int | None
    aborted: bool = False


@dataclass(frozen=True, kw_only=True)
class InferenceInfo:
    """How a response ended, for ``after_inference``."""

    state: str | None
    tokens: Tokens | None = None
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class MessageAccepted:
    """A queued message entering the conversation, as it was queued (a tool request block
    included), for ``message_accepted_transact`` / ``message_accepted``."""

    id: str
    kind: QueueName
    message: QueueableMessage
    metadata: JSONObject | None = None


@dataclass(frozen=True, kw_only=True)
class MetadataChange:
    """A shallow merge of an agent's metadata, for ``metadata_changed(_transact)``."""

    previous: JSONObject
    current: JSONObject
    patch: JSONObject


@dataclass(frozen=True, kw_only=True)
class PermissionModeChange:
    """A consumed message changing the agent's permission mode, for
    ``permission_mode_changed_transact`` / ``permission_mode_changed``."""

    previous: PermissionMode
    current: PermissionMode


@dataclass(frozen=True, kw_only=True)
class ModelChange:
    """An agent's provider, model or profile switch, for ``model_changed``.

    ``was_reset`` is True when the new model cannot read the old history, or the profile in
    effect changed (profiles never share model context), so the old history is archived and the
    conversation starts again (with the handoff a hook returns).
    """

    previous: Settings
    current: Settings
    was_reset: bool

    @property
    def previous_profile(self) -> str | None:
        """The profile in effect before the consumed message (None: the null profile)."""
        return self.previous.profile

    @property
    def profile(self) -> str | None:
        """The profile the consumed message selects (None: the null profile)."""
        return self.current.profile

    @property
    def profile_changed(self) -> bool:
        """True when the switch changes the profile in effect (it then always resets)."""
        return self.previous.profile != self.current.profile


@dataclass(frozen=True, kw_only=True)
class MessageBoundary:
    """The history position right before a queued message is appended, for
    ``system_notifications_transact``: after any model or profile reset its consumption
    causes, before its own record. ``accepted`` is the message's original accepted envelope
    (its id, queue, message and metadata, as ``message_accepted`` is told)."""

    accepted: MessageAccepted
    type: Literal["message"] = "message"


@dataclass(frozen=True, kw_only=True)
class InferenceBoundary:
    """The history position right before a provider request, for
    ``system_notifications_transact``: pending tool results and compaction have settled,
    queued input has joined. The request's lifecycle ids (``docs/lifecycle.md``); the
    ``inference_id`` is the one the request is made under."""

    loop_id: str | None
    turn_id: str | None
    inference_id: str | None
    type: Literal["inference"] = "inference"


NotificationBoundary: TypeAlias = MessageBoundary | InferenceBoundary
"""Where ``system_notifications_transact`` is asked for notices (its ``boundary.type``)."""


@dataclass(frozen=True, kw_only=True)
class HookContext:
    """What every hook receives: the agent it serves and the stores it may use.

    ``kv`` (this agent's conversation), ``run_kv`` (erased when the agent settles) and
    ``shared_kv`` (shared by every agent of the system) are narrowed to ``feature.<name>``,
    and so is ``history_kv`` (this agent's current conversation history: erased with it by a
    compaction, an incompatible model switch or a profile change).
    Tool-call hooks also get ``call_kv``: the call's own store for this feature, erased in the
    transaction that appends the call's result. In a transactional hook (``…_transact``)
    every store is bound to that transaction (its writes commit or roll back with it, and it
    refuses use once the hook returned).
    ``system`` is the system as seen from inside an agent (no close, no wait).

    The lifecycle ids (``docs/lifecycle.md``) name what the hook belongs to; each
    is None where the hook belongs to none (outside a run, say). They are written with the
    agent's outstanding work before the first hook is told them and survive a restart, so a
    hook may key durable state on them:

    Attributes:
        loop_id: The loop (a run, settled to settled): every hook of a run.
        turn_id: The turn within the loop: every hook of a run but ``before_agent_loop``'s
            reopening and the settlement's.
        inference_id: The provider request: ``before_inference``, ``after_inference``, their
            transactional twins and ``on_event_transact`` of its blocks.
            Never shared by two requests (a request whose completed content a crash cut
            short is retired and continued under a new id).
        settlement_id: The settlement: ``after_agent_settled_transact`` and
            ``after_agent_settled`` (persisted with the owed work before the first of them).
        context_tokens: The provider's last measurement of the context (tokens; None: not
            measured since the last reset or compaction), for ``prepare_inference``; None
            elsewhere.

    What the session's pinned definition refers to (docs/sessions.md), for every hook of
    the agent; empty for an agent made without a definition:

    Attributes:
        cwd: ``workspace.cwd``: the directory the session works in (None: the host decides).
        resources: ``resources``: the ``files``, ``skills`` and ``subagents`` it names
            (opaque references the host resolves).
        driver_config: ``driver.config``: the native driver's non-secret configuration.

    ``provider``, ``model``, ``effort`` and ``service_tier`` read ``settings``, and ``config``
    is the agent's configuration as JSON (its ``AgentConfig``: ``features`` holds each
    feature's entry); ``feature_config`` is the hooked feature's own entry (``{}``: none).
    """

    agent_id: str
    settings: Settings
    system: AgentSystemRef
    kv: KeyValueStore
    run_kv: KeyValueStore
    shared_kv: KeyValueStore
    call_kv: KeyValueStore | None = None
    config: dict[str, Any] = field(default_factory=dict)
    loop_id: str | None = None
    turn_id: str | None = None
    inference_id: str | None = None
    settlement_id: str | None = None
    context_tokens: int | None = None  # the last measured context (prepare_inference)
    open_history_kv: Callable[[], KeyValueStore] | None = None  # makes history_kv

    @cached_property
    def history_kv(self) -> KeyValueStore:
        """This feature's store for the agent's current conversation history.

        Durable across turns and restarts, it belongs to the history: a committed
        compaction, an incompatible model switch or a profile change erases it in the
        transaction that replaces the history. The handle is bound to the history current
        when it is first read from this context; once that history was replaced, any use of
        it raises :class:`~agentkeep.errors.ExpiredScopeError`. In a transactional hook it
        joins the hook's transaction like the other stores.

        Raises:
            AgentkeepError: this context was made without one (outside an agent).
        """
        if self.open_history_kv is None:
            raise AgentkeepError("This hook context has no history store (open_history_kv).")
        return self.open_history_kv()

    # -- a session's definition references --
    cwd: str | None = None  # the pinned definition's workspace.cwd (None: none)
    resources: Resources = field(default_factory=Resources)  # its resources
    driver_config: JSONObject = field(default_factory=dict)  # its driver.config
    # this feature's own entry of the agent's ``AgentConfig.features`` ({} if none)
    feature_config: dict[str, Any] = field(default_factory=dict)

    @property
    def provider(self) -> str | None:
        """The agent's provider id for this hook (``settings.provider``)."""
        return self.settings.provider

    @property
    def model(self) -> str | None:
        """The agent's model for this hook (``settings.model``; None: the provider's own)."""
        return self.settings.model

    @property
    def effort(self) -> ReasoningEffort | None:
        """The agent's reasoning effort for this hook (``settings.effort``)."""
        return self.settings.effort

    @property
    def service_tier(self) -> ServiceTier | None:
        """The agent's service tier for this hook (``settings.service_tier``)."""
        return self.settings.service_tier

    @property
    def permission_mode(self) -> PermissionMode:
        """The agent's effective permission mode for this hook: the durable mode when the
        response or tool batch it belongs to started (the runtime enforces nothing)."""
        return self.settings.permission_mode

    @property
    def profile(self) -> str | None:
        """The agent's effective profile for this hook (opaque; None: the null profile): the
        one the last consumed message selected. It is never sent to the provider."""
        return self.settings.profile

    def in_tx(self, work: Callable[[SystemTransaction], T]) -> T:
        """Run ``work(t)`` in one store transaction and return what it returned: this hook's
        own transaction if it runs in one (a ``…_transact`` hook: ``work``'s writes and sends
        commit or roll back with the hook's), else a new one
        (:meth:`AgentSystem.transaction <agentkeep.AgentSystem.transaction>`). ``t`` expires
        when ``work`` returns. Whatever ``work`` raises propagates (a reused transaction
        then rolls back with the hook that lets it escape).
        """
        return self.system.transaction(work)
