"""The contexts one agent's features are handed: which stores a hook sees, and how it reaches
back into the system."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentkeep.features import Feature, HookContext
from agentkeep.loop.effects import LifecycleIds
from agentkeep.persistence.interface import StoreHandle, Transaction
from agentkeep.persistence.kv import ScopedKV
from agentkeep.refs import AgentSystemRef
from agentkeep.registry.types import Definition, Resources
from agentkeep.runtime.history_kv import history_kv
from agentkeep.runtime.kv_areas import CALL_AREA, KV_AREA, RUN_AREA
from agentkeep.types import JSONObject, Settings

_NO_IDS = LifecycleIds()
_NO_RESOURCES = Resources()


class HookContexts:
    """Makes the :class:`~agentkeep.features.HookContext` of each hook one agent runs.

    Immutable once made (one per agent, by ``AgentFactory``), so any thread may use it: the
    actor's, a tool call's, or a caller's (``update_metadata``).

    Args:
        agent_id: The agent whose hooks these are.
        store: Where a context's stores read and write (outside a transaction).
        config: The agent's configuration as JSON (its ``AgentConfig``).
        system_ref: How a hook sends to agents; inside a transaction its sends join it.
        definition: The session's pinned definition, whose references (``workspace.cwd``,
            ``resources``, ``driver.config``, ``authRef``) its hooks and tools are told; None
            for an agent made without one.
    """

    def __init__(
        self,
        agent_id: str,
        *,
        store: StoreHandle,
        config: dict[str, Any],
        system_ref: AgentSystemRef,
        definition: Definition | None = None,
    ) -> None:
        self._agent_id = agent_id
        self._store = store
        self._config = config
        self._system_ref = system_ref
        self._definition = definition

    @property
    def config(self) -> dict[str, Any]:
        """The agent's configuration as JSON (its ``AgentConfig``)."""
        return self._config

    @property
    def definition(self) -> Definition | None:
        """The session's pinned definition (None: the agent has none)."""
        return self._definition

    @property
    def cwd(self) -> str | None:
        """The pinned definition's ``workspace.cwd`` (None: none, or no definition)."""
        return None if self._definition is None else self._definition.workspace.cwd

    @property
    def resources(self) -> Resources:
        """The pinned definition's ``resources`` (empty without a definition)."""
        return _NO_RESOURCES if self._definition is None else self._definition.resources

    @property
    def driver_config(self) -> JSONObject:
        """The pinned definition's ``driver.config`` (empty without a definition)."""
        return {} if self._definition is None else self._definition.driver.config

    @property
    def auth_ref(self) -> str | None:
        """The pinned definition's ``authRef`` (a reference, never a secret)."""
        return None if self._definition is None else self._definition.auth_ref

    @property
    def store(self) -> StoreHandle:
        """The store the contexts read and write (a transactional tool's transaction)."""
        return self._store

    def for_feature(
        self,
        feature: Feature,
        settings: Settings,
        *,
        tx: Transaction | None = None,
        call_id: str | None = None,
        alive: Callable[[], bool] | None = None,
        ids: LifecycleIds | None = None,
    ) -> HookContext:
        """The context of ``feature``'s hook.

        With ``tx`` (a transactional hook) every store is bound to that transaction and the
        hook's sends and steers are told to their agents only after it commits; with
        ``call_id`` (a tool-call hook) it also has the call's store, which refuses use once
        ``alive()`` is False. ``ids``: the lifecycle ids the hook is told (none outside a
        run). Its ``history_kv`` is made when first read (one read of the history's
        generation, in ``tx`` if any), never for a hook that does not use it. Raises nothing
        itself: its stores raise when used wrongly.
        """
        ids = ids or _NO_IDS
        name = feature.name

        def scope(*segments: str) -> ScopedKV:
            if tx is not None:
                return ScopedKV.in_transaction(tx, *segments)
            return ScopedKV.through(self._store, *segments)

        call_kv = None
        if call_id is not None:
            call_kv = scope("agent", self._agent_id, CALL_AREA, call_id, "feature", name)
            if alive is not None:
                call_kv = call_kv.until(alive)
        return HookContext(
            agent_id=self._agent_id,
            settings=settings,
            config=self._config,
            kv=scope("agent", self._agent_id, KV_AREA, "feature", name),
            run_kv=scope("agent", self._agent_id, RUN_AREA, "feature", name),
            shared_kv=scope("system", "feature", name),
            call_kv=call_kv,
            # Inside a transaction, sends and steers join it (told to the agent after commit).
            system=self._system_ref if tx is None else self._system_ref.within(tx),
            loop_id=ids.loop_id,
            turn_id=ids.turn_id,
            inference_id=ids.inference_id,
            settlement_id=ids.settlement_id,
            open_history_kv=lambda: history_kv(
                self._agent_id, "feature", name, tx=tx, store=self._store
            ),
            cwd=self.cwd,
            resources=self.resources,
            driver_config=self.driver_config,
            feature_config=self._config.get("features", {}).get(name) or {},
        )

    def tool_history_kv(self, tool_id: str, tx: Transaction | None = None) -> ScopedKV:
        """The history KV a tool sees, narrowed to ``tool.<tool id>`` and bound to the history
        current now (``runtime.history_kv``): in ``tx`` (a transactional tool) or through the
        store."""
        return history_kv(self._agent_id, "tool", tool_id, tx=tx, store=self._store)

    def call_kv(self, internal_id: str, alive: Callable[[], bool]) -> ScopedKV:
        """The store a tool sees for one call; it refuses use once ``alive()`` is False (the
        call returned), so a retained handle can never write behind its result (invariant
        I20)."""
        scope = ScopedKV.through(self._store, "agent", self._agent_id, CALL_AREA, internal_id)
        return scope.until(alive)
