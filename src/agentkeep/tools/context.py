"""What a tool's ``execute`` is handed: the :class:`ToolContext` protocol and a plain one.

Import them from :mod:`agentkeep.tools`. The runtime's own context
(``agentkeep.actors.call_context``) satisfies the protocol structurally;
:class:`BasicToolContext` is the one tests and code outside an agent build.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from agentkeep.errors import AgentkeepError
from agentkeep.key_value import KeyValueStore
from agentkeep.providers.protocol import CancelToken
from agentkeep.refs import AgentSystemRef
from agentkeep.registry.types import Resources
from agentkeep.types import (
    JSONObject,
    PermissionMode,
    ReasoningEffort,
    ServiceTier,
    Settings,
)


class ToolContext(Protocol):
    """What a tool's ``execute`` receives. The runtime supplies it; tools never build one.

    Attributes:
        agent_id: The agent running the call.
        call_id: agentkeep's own durable id of the call.
        provider_call_id: The model's id of the call (``ToolCallBlock.call_id``).
        cancel: Fires when the call's lifetime ends (abort, close, or the call itself).
        kv: The call-scoped key-value store; it refuses use once the call returned.
        system: The system as seen from inside the agent (no close, no waits): message,
            create, resolve, compact or abort agents from a tool.
        permission_mode: The permission mode this execution runs under: the agent's mode
            when the call's batch started, or the one a ``before_tool_call`` chose for it.
            The runtime enforces nothing; a tool that touches the world should honour it.
        loop_id: The run (settled to settled) the call belongs to (``docs/lifecycle.md``).
        turn_id: The turn the call belongs to.
        inference_id: The provider request whose response asked for the call; None for a
            call recovered after a restart or requested by a user message.
        history_kv: The tool's store for the agent's current conversation history, narrowed
            to ``tool.<tool id>`` (shared by every call of that tool, no other tool's):
            erased with that history (compaction, incompatible model switch, profile change);
            a handle refuses use once its history was replaced or its call returned.
        settings: The agent's settings when the call's batch started; ``provider``,
            ``model``, ``effort`` and ``service_tier`` read them.
        config: The agent's configuration as JSON (its ``AgentConfig``).
        cwd: The session's ``workspace.cwd`` (None: none, or no definition).
        resources: The session's ``resources`` (``files``, ``skills``, ``subagents``).
        driver_config: The session's ``driver.config``.

    Inside a ``transactional`` tool, ``kv``, ``history_kv`` and ``system`` are bound to the
    call's transaction (they refuse use once it ended) and ``commit`` joins it.
    """

    @property
    def agent_id(self) -> str:
        """The agent running the call."""
        ...

    @property
    def call_id(self) -> str:
        """agentkeep's own durable id of the call (stable across a restart that re-runs it)."""
        ...

    @property
    def provider_call_id(self) -> str:
        """The model's id of the call (``ToolCallBlock.call_id``)."""
        ...

    @property
    def cancel(self) -> CancelToken:
        """Fires when the call's lifetime ends (abort, close, or the call itself); a long tool
        should watch it.
        """
        ...

    @property
    def kv(self) -> KeyValueStore:
        """The call-scoped key-value store; it refuses use once the call returned."""
        ...

    @property
    def system(self) -> AgentSystemRef:
        """The system as seen from inside the agent (no close, no waits)."""
        ...

    @property
    def permission_mode(self) -> PermissionMode:
        """The permission mode this execution runs under (the runtime enforces nothing)."""
        ...

    @property
    def loop_id(self) -> str | None:
        """The run (settled to settled) the call belongs to: the ``loop_id`` its agent's
        lifecycle hooks are told (None outside an agent)."""
        ...

    @property
    def turn_id(self) -> str | None:
        """The turn the call belongs to: the ``turn_id`` its agent's lifecycle hooks are told
        (None outside an agent)."""
        ...

    @property
    def inference_id(self) -> str | None:
        """The provider request whose response asked for the call: the ``inference_id`` its
        ``before_inference`` / ``after_inference`` hooks were told. None for a call recovered
        after a restart (that request is not known then) or requested by a user message."""
        ...

    @property
    def history_kv(self) -> KeyValueStore:
        """The tool's store for the agent's current conversation history (``tool.<tool
        id>``), durable across turns and restarts and erased in the transaction that replaces
        that history (a compaction, an incompatible model switch, a profile change).

        Bound to the history current when first read; it raises
        :class:`~agentkeep.errors.ExpiredScopeError` once that history was replaced, or once
        the call returned or was cancelled. Inside a ``transactional`` tool it joins the call's
        transaction.
        """
        ...

    # -- the agent's settings and its definition's references --

    @property
    def settings(self) -> Settings:
        """The agent's settings when the call's batch started (the ones its hooks saw)."""
        ...

    @property
    def provider(self) -> str | None:
        """The agent's provider id (``settings.provider``)."""
        ...

    @property
    def model(self) -> str | None:
        """The agent's model (``settings.model``; None: the provider's default)."""
        ...

    @property
    def effort(self) -> ReasoningEffort | None:
        """The agent's reasoning effort (``settings.effort``)."""
        ...

    @property
    def service_tier(self) -> ServiceTier | None:
        """The agent's service tier (``settings.service_tier``)."""
        ...

    @property
    def config(self) -> dict[str, Any]:
        """The agent's configuration as JSON (its ``AgentConfig``: ``features``,
        ``metadata``, …), as its hooks see it."""
        ...

    @property
    def cwd(self) -> str | None:
        """The session's ``workspace.cwd``: where a tool that touches files should work
        (None: no definition, or it names none)."""
        ...

    @property
    def resources(self) -> Resources:
        """The session's ``resources``: the files, skills and subagents its definition names
        (opaque references the host resolves; empty without a definition)."""
        ...

    @property
    def driver_config(self) -> JSONObject:
        """The session's ``driver.config`` (empty without a definition)."""
        ...

    def commit(self, result: Any) -> bool:
        """Durably save ``result`` as this call's result now (``ctx.commit``).

        ``result`` is validated against the tool's result type and rendered as a return
        would be, then claimed in one store transaction that also erases the call's ``kv``
        (which refuses use afterwards). Inside a transactional tool that transaction is the
        tool's own, so the result commits atomically with the tool's writes (and rolls back
        with them if the tool then raises). The first successful commit wins: the tool's
        later return or raise is ignored, the call is never run again (not even after a
        crash), and the result lands in its batch's order.

        Returns:
            True if this commit saved the result; False if a result was committed already.

        Raises:
            ToolCommitError: ``result`` does not match the result type or cannot be
                rendered, or the call is no longer live (it was aborted or had returned).
        """
        ...


@dataclass(frozen=True, kw_only=True)
class BasicToolContext:
    """A plain :class:`ToolContext`, for tests and for calling a tool outside an agent.

    Outside an agent there may be no store or system: ``kv`` and ``system`` then raise
    :class:`~agentkeep.errors.AgentkeepError` saying so (pass ``kv_store`` /
    ``system_ref`` to give them).
    """

    agent_id: str = "agent"
    call_id: str = "call"
    provider_call_id: str = "call"
    cancel: CancelToken = field(default_factory=CancelToken)
    kv_store: KeyValueStore | None = None
    system_ref: AgentSystemRef | None = None
    permission_mode: PermissionMode = "auto"
    committed: list[Any] = field(default_factory=list)
    loop_id: str | None = None
    turn_id: str | None = None
    inference_id: str | None = None
    history_kv_store: KeyValueStore | None = None  # what history_kv returns
    # -- the agent's settings and its definition's references --
    settings: Settings = field(default_factory=Settings)  # provider, model, effort…
    config: dict[str, Any] = field(default_factory=dict)  # the AgentConfig as JSON
    cwd: str | None = None  # workspace.cwd
    resources: Resources = field(default_factory=Resources)  # resources
    driver_config: JSONObject = field(default_factory=dict)  # driver.config

    @property
    def provider(self) -> str | None:
        """``settings.provider``."""
        return self.settings.provider

    @property
    def model(self) -> str | None:
        """``settings.model``."""
        return self.settings.model

    @property
    def effort(self) -> ReasoningEffort | None:
        """``settings.effort``."""
        return self.settings.effort

    @property
    def service_tier(self) -> ServiceTier | None:
        """``settings.service_tier``."""
        return self.settings.service_tier

    def commit(self, result: Any) -> bool:
        """Keep the first ``result`` committed in ``committed``; True for that first one.

        Outside an agent nothing is validated or stored: a test reads ``committed``.
        """
        if self.committed:
            return False  # the first commit wins
        self.committed.append(result)
        return True

    @property
    def kv(self) -> KeyValueStore:
        """The ``kv_store`` this context was given.

        Raises:
            AgentkeepError: it was given none.
        """
        if self.kv_store is None:
            raise AgentkeepError("This tool context has no key-value store (kv_store).")
        return self.kv_store

    @property
    def history_kv(self) -> KeyValueStore:
        """The ``history_kv_store`` this context was given.

        Raises:
            AgentkeepError: it was given none.
        """
        if self.history_kv_store is None:
            raise AgentkeepError("This tool context has no history store (history_kv_store).")
        return self.history_kv_store

    @property
    def system(self) -> AgentSystemRef:
        """The ``system_ref`` this context was given.

        Raises:
            AgentkeepError: it was given none.
        """
        if self.system_ref is None:
            raise AgentkeepError("This tool context has no system (system_ref).")
        return self.system_ref
