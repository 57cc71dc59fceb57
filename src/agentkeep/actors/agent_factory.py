"""Where an agent's collaborators are made and its actor is started: the one place that knows
what an :class:`~agentkeep.actors.agent_actor.AgentActor` depends on."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import pykka

from agentkeep.actors import agent_children
from agentkeep.actors.agent_actor import AgentActor, LoopOptions
from agentkeep.actors.directory import KnownAgent
from agentkeep.actors.hook_contexts import HookContexts
from agentkeep.actors.status import AgentStatus
from agentkeep.actors.tool_runner import ToolRunner
from agentkeep.features import FeatureSet
from agentkeep.modules._runtime import ModuleRuntime
from agentkeep.persistence.interface import StoreHandle
from agentkeep.providers.catalog import Providers
from agentkeep.refs import AgentSystemRef
from agentkeep.registry.types import Definition
from agentkeep.runtime.base_state import BaseStateSource, StateDefaults
from agentkeep.tools import Tool


class AgentFactory:
    """Makes the :class:`~agentkeep.actors.directory.KnownAgent` of each agent of one system.

    Immutable once made (by ``AgentSystem``); any thread may call :meth:`make`.

    Args:
        store: The system's store (loads, commits, the hooks' stores).
        providers: The system's providers.
        features: The system's features.
        modules: The system's modules (an actor's first load restores its agent to them).
        tools: The system's own tools.
        options: How every agent loop is configured.
    """

    def __init__(
        self,
        *,
        store: StoreHandle,
        providers: Providers,
        features: FeatureSet,
        modules: ModuleRuntime | None = None,
        tools: Sequence[Tool[Any, Any]],
        options: LoopOptions,
    ) -> None:
        self._store = store
        self._providers = providers
        self._features = features
        self._modules = modules
        self._tools = tools
        self._options = options

    def make(
        self,
        agent_id: str,
        *,
        config: dict[str, Any],
        system_ref: AgentSystemRef,
        status: AgentStatus,
        on_stopped: Callable[[str, bool], None],
        instructions: str | None = None,
        tool_ids: frozenset[str] | None = None,
        definition: Definition | None = None,
    ) -> KnownAgent:
        """The entry of ``agent_id``: its hook contexts and tool runner (shared by its actor
        incarnations), and how to start one incarnation. Raises nothing.

        Args:
            agent_id: The agent.
            config: Its feature configuration (from its row).
            system_ref: Its reference to the system (hooks and tools send through it).
            status: What callers wait on; every incarnation keeps it current.
            on_stopped: Told ``(agent_id, settled)`` once a run stopped.
            instructions: Its own base instructions (a session's pinned revision), instead
                of the system's; None: the system's.
            tool_ids: The ids of the only tools it is offered, the system's and the
                features' (a session's ``toolbox.toolIds``); None: every tool.
            definition: Its session's pinned definition, whose references its hooks and
                tools are told and whose ``authRef`` its requests are sent under.
        """
        options = self._options
        if instructions is not None:
            options = dataclasses.replace(options, instructions=instructions)
        # Its own base state: what it changed, over its revision's (or the system's) defaults.
        base_state = BaseStateSource(
            self._store,
            agent_id,
            StateDefaults(instructions=options.instructions, tools=tool_ids),
        )
        contexts = HookContexts(
            agent_id,
            store=self._store,
            config=config,
            system_ref=system_ref,
            definition=definition,
        )
        tool_runner = ToolRunner(
            agent_id,
            features=self._features,
            tools=self._tools,
            contexts=contexts,
            system_ref=system_ref,
            selection=base_state.selection,
        )
        # Read when the agent becomes known (a test may lengthen it for its agents).
        child_grace_seconds = agent_children.CHILD_GRACE_SECONDS

        def start_actor() -> pykka.ActorRef[Any]:
            return AgentActor.start(
                agent_id,
                options=options,
                store=self._store,
                providers=self._providers,
                features=self._features,
                modules=self._modules,
                contexts=contexts,
                tool_runner=tool_runner,
                status=status,
                on_stopped=on_stopped,
                child_grace_seconds=child_grace_seconds,
                base_state=base_state,
            )

        return KnownAgent(
            agent_id=agent_id, status=status, contexts=contexts, start_actor=start_actor
        )
