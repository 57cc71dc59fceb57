"""``Agent``: a handle on one agent of a system. Holds no state of its own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, Unpack

from msgspec import UNSET, UnsetType

from agentkeep.agent_system._transactions import outside_transaction
from agentkeep.delivery import Delivery, SendOptions
from agentkeep.features import Feature
from agentkeep.history import HistoryEpoch, PurgeResult
from agentkeep.runtime.base_state import AgentBaseState
from agentkeep.types import JSONObject, Message, QueueableMessage, Settings

if TYPE_CHECKING:
    from agentkeep.agent_system._internals import SystemInternals
    from agentkeep.agent_system._reads import Reads


class AgentOwner(Protocol):
    """What an :class:`Agent` asks of its system (the :class:`~agentkeep.AgentSystem`
    facade): each handle method is one call on it, with the agent's id."""

    @property
    def internals(self) -> SystemInternals: ...

    def send(
        self, agent_id: str, message: QueueableMessage, **options: Unpack[SendOptions]
    ) -> Delivery: ...

    def steer(
        self, agent_id: str, message: QueueableMessage, **options: Unpack[SendOptions]
    ) -> Delivery: ...

    def update_metadata(self, agent_id: str, patch: JSONObject) -> JSONObject: ...

    def abort(
        self, agent_id: str, *, wait: bool = False, timeout_seconds: float | None = None
    ) -> None: ...

    def compact(
        self, agent_id: str, *, wait: bool = False, timeout_seconds: float | None = None
    ) -> None: ...

    def wait_for_idle(self, agent_id: str, *, timeout_seconds: float | None = None) -> bool: ...

    def transcript(self, agent_id: str) -> list[Message]: ...

    def settings(self, agent_id: str) -> Settings: ...

    def context_tokens(self, agent_id: str) -> int | None: ...

    def state(self, agent_id: str) -> str: ...

    def feature(self, name: str) -> Feature: ...

    def base_state(self, agent_id: str) -> AgentBaseState: ...

    def update_base_state(
        self,
        agent_id: str,
        *,
        instructions: str | UnsetType = UNSET,
        tools: Sequence[str] | UnsetType | None = UNSET,
    ) -> AgentBaseState: ...


class Agent:
    """One agent of a system. Cheap to create; holds no state of its own."""

    def __init__(self, system: AgentOwner, agent_id: str) -> None:
        self._system = system
        self._reads: Reads = system.internals.reads
        self.id = agent_id

    def __repr__(self) -> str:
        return f"Agent(id={self.id!r})"

    @outside_transaction
    def send(
        self,
        message: QueueableMessage,
        **options: Unpack[SendOptions],
    ) -> Delivery:
        """Queue a message on the send queue; returns once it is durable (the options are
        :meth:`AgentSystem.send`'s)."""
        return self._system.send(self.id, message, **options)

    @outside_transaction
    def steer(
        self,
        message: QueueableMessage,
        **options: Unpack[SendOptions],
    ) -> Delivery:
        """Queue a message on the steering queue; returns once it is durable."""
        return self._system.steer(self.id, message, **options)

    @outside_transaction
    def update_metadata(self, patch: JSONObject) -> JSONObject:
        """Shallow-merge ``patch`` into the agent's metadata; committed before it shows (the
        ``metadata_changed_transact`` and ``metadata_changed`` hooks fire, as for
        :meth:`AgentSystem.update_metadata`).

        Returns:
            The merged metadata.

        Raises:
            UnknownAgentError: the agent does not exist.
            AgentClosedError: the system is closing or closed.
            InvalidConfigError: ``patch`` is not a JSON object.
        """
        return self._system.update_metadata(self.id, patch)

    @outside_transaction
    def abort(self, *, wait: bool = False, timeout_seconds: float | None = None) -> None:
        """Abort the agent's running turn; a no-op when it has none.

        The abort is handled by the agent's loop at its next step; the actions a hook
        is returning meanwhile are dropped. The turn ends ``cancelled`` with the input steers
        joined to it and that still waited; the turns queued behind it then run
        (docs/turns.md).

        Args:
            wait: block until the aborted work has stopped (turns queued behind it go on).
            timeout_seconds: how long ``wait`` may block (None: no limit).

        Raises:
            UnknownAgentError: the agent was never created.
            AwaitFromOwnLoopError: ``wait`` from inside the agent's own loop (a tool or hook).
        """
        self._system.abort(self.id, wait=wait, timeout_seconds=timeout_seconds)

    @outside_transaction
    def compact(self, *, wait: bool = False, timeout_seconds: float | None = None) -> None:
        """Ask the agent to compact its context, after its current step.

        Args:
            wait: block until this compaction's outcome (callers asking meanwhile share it).
            timeout_seconds: how long ``wait`` may block (None: no limit).

        Raises:
            UnknownAgentError: the agent was never created.
            AgentClosedError: the system is closing or closed.
            AwaitFromOwnLoopError: ``wait`` from inside the agent's own loop, or from inside
                another agent's loop while this agent runs a tool (they could wait for each
                other).
            CompactionFailedError: (with ``wait``) the compaction failed or was not confirmed.
            TimeoutError: (with ``wait``) no outcome within ``timeout_seconds``.
        """
        self._system.compact(self.id, wait=wait, timeout_seconds=timeout_seconds)

    @outside_transaction
    def wait_for_idle(self, *, timeout_seconds: float | None = None) -> bool:
        """Block until the agent has nothing running.

        Returns:
            True once idle; False if ``timeout_seconds`` passed first.

        Raises:
            UnknownAgentError: the agent was never created.
            AwaitFromOwnLoopError: called from inside the agent's own loop (it would wait for
                itself).
        """
        return self._system.wait_for_idle(self.id, timeout_seconds=timeout_seconds)

    def transcript(self) -> list[Message]:
        """The current durable conversation, oldest message first (what the model sees next).

        A deleted agent's transcript stays readable. :meth:`history` adds the archived epochs.

        Raises:
            UnknownAgentError: the agent was never created.
            AgentClosedError: the system is closing or closed.
        """
        return self._system.transcript(self.id)

    def history(self) -> list[HistoryEpoch]:
        """Everything the agent ever said and heard, by epoch: the archived epochs that an
        incompatible model switch or a compaction took out of the provider's view (oldest
        first, ``archived=True``), then the current conversation (what :meth:`transcript`
        returns) as the last epoch. Archived epochs stay until :meth:`purge_archived`.

        Raises:
            UnknownAgentError: the agent does not exist (or was deleted).
            AgentClosedError: the system is closing or closed.
        """
        return self._reads.history(self.id)

    @outside_transaction
    def purge_archived(self) -> PurgeResult:
        """Physically delete the agent's archived epochs (see :meth:`history`); the current
        conversation is untouched. Nothing else in agentkeep deletes conversation records.

        Raises:
            UnknownAgentError: the agent does not exist (or was deleted).
            AgentClosedError: the system is closing or closed.
            PartitionNotOwnedError: the agent is another partition's.
        """
        self._system.internals.ownership.check(self.id)
        return self._reads.purge_archived(self.id)

    @property
    def settings(self) -> Settings:
        """The agent's current settings: the system's defaults until a message chose others.

        Raises:
            UnknownAgentError: the agent does not exist.
            AgentClosedError: the system is closing or closed.
        """
        return self._system.settings(self.id)

    @property
    def context_tokens(self) -> int | None:
        """The agent's context size in tokens as last recorded; None until a response measured it.

        Raises:
            UnknownAgentError: the agent does not exist.
            AgentClosedError: the system is closing or closed.
        """
        return self._system.context_tokens(self.id)

    @property
    def state(self) -> str:
        """``"running"`` (a turn runs now), ``"owes_work"`` (durable work is due) or ``"idle"``.

        Raises:
            UnknownAgentError: the agent does not exist.
            AgentClosedError: the system is closing or closed.
        """
        return self._system.state(self.id)

    def feature(self, name: str) -> Feature:
        """The running instance of the feature named ``name`` (the system's: every agent
        runs the same instances; see :meth:`AgentSystem.feature
        <agentkeep.AgentSystem.feature>`).

        Raises:
            UnknownFeatureError: the system has no feature of that name.
        """
        return self._system.feature(name)

    @property
    def base_state(self) -> AgentBaseState:
        """The agent's own instructions and tools (:meth:`AgentSystem.base_state
        <agentkeep.AgentSystem.base_state>`)."""
        return self._system.base_state(self.id)

    def update_base_state(
        self,
        *,
        instructions: str | UnsetType = UNSET,
        tools: Sequence[str] | UnsetType | None = UNSET,
    ) -> AgentBaseState:
        """Change the agent's base state durably (:meth:`AgentSystem.update_base_state
        <agentkeep.AgentSystem.update_base_state>`)."""
        return self._system.update_base_state(self.id, instructions=instructions, tools=tools)
