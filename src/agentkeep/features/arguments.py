"""What feature hooks are handed: the :class:`HookContext` every hook receives, and the
value each kind of hook is told about (a turn, a response, an accepted message, a change).

Import them from :mod:`agentkeep.features` (or from ``agentkeep``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentkeep.key_value import KeyValueStore
from agentkeep.refs import AgentSystemRef
from agentkeep.types import JSONObject, PermissionMode, QueueableMessage, Settings, Tokens
from agentkeep.types.records import QueueName


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
class HookContext:
    """What every hook receives: the agent it serves and the stores it may use.

    ``kv`` (this agent's conversation), ``run_kv`` (erased when the agent settles) and
    ``shared_kv`` (shared by every agent of the system) are narrowed to ``feature.<name>``.
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
