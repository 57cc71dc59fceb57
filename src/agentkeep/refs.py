"""The system as seen from inside an agent: what hooks and tools are handed.

Code some agent's loop is waiting for (a hook, a tool) must never reach an operation that
waits for a loop, so these views have no ``close``, ``wait_for_idle``, ``delete`` or ``start``,
and ``compact``/``abort`` are requests that return once made. A message is the one thing a
caller here is told about: addressed to another agent, ``send``/``steer`` return once it is
durably queued; addressed to the agent the caller runs in, it is queued the same way — the
write goes through the store's writer, never through the agent's own loop, so it cannot wait
for itself. Identities have no public constructor: the runtime builds them.

Bound to a transaction (a transactional hook's or tool's, :meth:`AgentSystemRef.within`), a
view sends and steers inside it and reads, and refuses the rest (``create``,
``update_metadata``, ``compact``, ``abort``) with ``TransactionScopeError``: they need a
transaction of their own or act at once, where a rollback could not undo them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar, Unpack

from agentkeep.config import AgentConfig
from agentkeep.delivery import Delivery, SendOptions
from agentkeep.errors import TransactionScopeError, UnknownAgentError
from agentkeep.persistence.interface import Transaction
from agentkeep.system_transaction import AcceptancePort, SystemTransaction, run_within
from agentkeep.types import JSONObject, Message, QueueableMessage

T = TypeVar("T")
_UNSET: Any = object()


class _Identified(Protocol):
    @property
    def id(self) -> str: ...


class SystemPort(Protocol):
    """What these views need from the :class:`~agentkeep.AgentSystem` they belong to.

    ``AgentSystem`` satisfies it structurally (mypy checks that where the system builds its
    references). It is declared here, not imported, because references sit below the actors
    and the system in the layering (``docs/architecture.md``): tools and features hold them,
    and the actors run those, so naming the system here would import upward.
    """

    def parent_of(self, agent_id: str) -> str | None:
        """The id of the agent's parent, or None; raises ``UnknownAgentError``."""
        ...

    def children_of(self, agent_id: str) -> list[str]:
        """The ids of the agent's live children, sorted; raises ``UnknownAgentError``."""
        ...

    def metadata(self, agent_id: str) -> JSONObject:
        """A copy of the agent's metadata; raises ``UnknownAgentError``."""
        ...

    def update_metadata(self, agent_id: str, patch: JSONObject) -> JSONObject:
        """Shallow-merge ``patch`` into the agent's metadata and return the result."""
        ...

    def compact(self, agent_id: str, *, wait: bool = False) -> None:
        """Ask the agent for a compaction (``wait``: block until its outcome)."""
        ...

    def abort(self, agent_id: str, *, wait: bool = False) -> None:
        """Abort the agent's running turn (``wait``: block until it is idle)."""
        ...

    def create(
        self,
        config: AgentConfig | None = None,
        *,
        id: str | None = None,
        parent: str | None = None,
        initial_context: Sequence[Message] | None = None,
    ) -> _Identified:
        """Create an agent (see :meth:`AgentSystem.create <agentkeep.AgentSystem.create>`)."""
        ...

    def resolve(self, agent_id: str) -> _Identified:
        """The agent with this id; raises ``UnknownAgentError``."""
        ...

    def transaction(self, work: Callable[[SystemTransaction], T]) -> T:
        """Run ``work`` in one store transaction (see
        :meth:`AgentSystem.transaction <agentkeep.AgentSystem.transaction>`)."""
        ...


def _refuse_in(tx: Transaction | None, command: str) -> None:
    """A reference bound to a transaction refuses the commands that cannot join it."""
    if tx is not None:
        raise TransactionScopeError(
            command, "Inside a transaction a reference may send, steer and read."
        )


class AgentRef:
    """One agent, seen from inside another agent's loop (or its own).

    Given to a hook that runs inside a transaction, ``send``/``steer`` queue the message in
    that transaction and tell the agent only once it committed (a rollback leaves nothing);
    ``compact``, ``abort`` and ``update_metadata`` cannot join it and are refused
    (``TransactionScopeError``).
    """

    __slots__ = ("_acceptance", "_system", "_tx", "id")

    def __init__(
        self,
        system: SystemPort,
        acceptance: AcceptancePort,
        agent_id: str,
        *,
        _token: object,
        tx: Transaction | None = None,
    ) -> None:
        if _token is not _UNSET:
            raise TypeError("AgentRef has no public constructor; resolve it from a context")
        self._system = system
        self._acceptance = acceptance
        self._tx = tx
        self.id = agent_id

    def __repr__(self) -> str:
        return f"AgentRef(id={self.id!r})"

    @property
    def parent(self) -> str | None:
        """The id of this agent's parent, or None for a top-level agent.

        Raises:
            UnknownAgentError: the agent does not exist.
            AgentClosedError: the system is closing or closed.
        """
        return self._system.parent_of(self.id)

    @property
    def metadata(self) -> JSONObject:
        """A copy of the agent's metadata, as last committed.

        Raises:
            UnknownAgentError: the agent does not exist.
            AgentClosedError: the system is closing or closed.
        """
        return self._system.metadata(self.id)

    def send(
        self,
        message: QueueableMessage,
        **options: Unpack[SendOptions],
    ) -> Delivery:
        """Queue on the send queue; returns once durably accepted (never waits for a loop).
        The options are :meth:`AgentSystem.send`'s."""
        return self._acceptance.send(
            self._tx, self.id, "send", message, options, where="AgentRef.send"
        )

    def steer(
        self,
        message: QueueableMessage,
        **options: Unpack[SendOptions],
    ) -> Delivery:
        """Queue on the steering queue; returns once durably accepted."""
        return self._acceptance.send(
            self._tx, self.id, "steering", message, options, where="AgentRef.steer"
        )

    def compact(self) -> None:
        """Ask for a compaction; returns once asked (refused inside a transaction)."""
        _refuse_in(self._tx, "AgentRef.compact")
        self._system.compact(self.id, wait=False)

    def abort(self) -> None:
        """Ask the agent to abort its turn; returns once asked (refused inside a
        transaction)."""
        _refuse_in(self._tx, "AgentRef.abort")
        self._system.abort(self.id, wait=False)

    def update_metadata(self, patch: JSONObject) -> JSONObject:
        """Shallow-merge ``patch`` into the agent's metadata (committed before it shows;
        refused inside a transaction)."""
        _refuse_in(self._tx, "AgentRef.update_metadata")
        return self._system.update_metadata(self.id, patch)


class AgentSystemRef:
    """The system, seen from inside the agent ``agent_id`` (or from outside any agent)."""

    __slots__ = ("_acceptance", "_system", "_tx", "agent_id")

    def __init__(
        self,
        system: SystemPort,
        acceptance: AcceptancePort,
        agent_id: str | None,
        *,
        _token: object,
        tx: Transaction | None = None,
    ) -> None:
        if _token is not _UNSET:
            raise TypeError("AgentSystemRef has no public constructor")
        self._system = system
        self._acceptance = acceptance
        self._tx = tx
        self.agent_id = agent_id

    def __repr__(self) -> str:
        return f"AgentSystemRef(agent_id={self.agent_id!r})"

    def within(self, tx: Transaction) -> AgentSystemRef:
        """This reference for a hook running inside ``tx`` (see :class:`AgentRef`)."""
        return AgentSystemRef(self._system, self._acceptance, self.agent_id, _token=_UNSET, tx=tx)

    def transaction(self, work: Callable[[SystemTransaction], T]) -> T:
        """Run ``work(t)`` in one store transaction and return what it returned: the
        transaction this reference is bound to (a transactional hook's or tool's), or else a
        new one (:meth:`AgentSystem.transaction <agentkeep.AgentSystem.transaction>`).

        Reusing a transaction, a raise from ``work`` propagates into the enclosing hook,
        which rolls that whole transaction back; ``t`` expires when ``work`` returns.
        """
        if self._tx is not None:
            return run_within(self._tx, self._acceptance, work)
        return self._system.transaction(work)

    def create(
        self,
        config: AgentConfig | None = None,
        *,
        id: str | None = None,
        parent: str | None = _UNSET,
        initial_context: Sequence[Message] | None = None,
    ) -> AgentRef:
        """Create an agent; its parent defaults to the agent this reference belongs to.
        Refused inside a transaction (``TransactionScopeError``)."""
        _refuse_in(self._tx, "AgentSystemRef.create")
        chosen = self.agent_id if parent is _UNSET else parent
        agent = self._system.create(config, id=id, parent=chosen, initial_context=initial_context)
        return make_agent_ref(self._system, self._acceptance, agent.id)

    def resolve(self, agent_id: str) -> AgentRef:
        """The agent ``agent_id``, seen from here (bound to this reference's transaction, if
        any: there the transaction itself says whether the agent exists, and the reference
        only addresses messages — it loads nothing).

        Bound to a transaction, the agent is looked up in it: one that transaction created
        (a module's ``agent_created_transact``) is found, and a message to it joins it.

        Raises:
            UnknownAgentError: no agent has the id.
            AgentClosedError: the system is closing or closed.
        """
        if self._tx is None:
            self._system.resolve(agent_id)
        elif self._tx.agents.get(agent_id) is None:
            raise UnknownAgentError(agent_id)
        return AgentRef(self._system, self._acceptance, agent_id, _token=_UNSET, tx=self._tx)

    def send(
        self,
        agent_id: str,
        message: QueueableMessage,
        **options: Unpack[SendOptions],
    ) -> Delivery:
        """Queue on ``agent_id``'s send queue (:meth:`AgentRef.send`)."""
        return self.resolve(agent_id).send(message, **options)

    def steer(
        self,
        agent_id: str,
        message: QueueableMessage,
        **options: Unpack[SendOptions],
    ) -> Delivery:
        """Queue on ``agent_id``'s steering queue (:meth:`AgentRef.steer`)."""
        return self.resolve(agent_id).steer(message, **options)

    def compact(self, agent_id: str) -> None:
        """Ask ``agent_id`` for a compaction (:meth:`AgentRef.compact`); returns once asked.

        Raises:
            UnknownAgentError: no agent has the id.
            AgentClosedError: the system is closing or closed.
            TransactionScopeError: inside a transaction.
        """
        _refuse_in(self._tx, "AgentSystemRef.compact")
        self.resolve(agent_id).compact()

    def abort(self, agent_id: str) -> None:
        """Ask ``agent_id`` to abort its turn (:meth:`AgentRef.abort`); returns once asked.

        Raises:
            UnknownAgentError: no agent has the id.
            TransactionScopeError: inside a transaction.
        """
        _refuse_in(self._tx, "AgentSystemRef.abort")
        self.resolve(agent_id).abort()

    def update_metadata(self, agent_id: str, patch: JSONObject) -> JSONObject:
        """Shallow-merge ``patch`` into ``agent_id``'s metadata; committed before it shows.

        Returns:
            The merged metadata.

        Raises:
            UnknownAgentError: no agent has the id.
            AgentClosedError: the system is closing or closed.
            InvalidConfigError: ``patch`` is not a JSON object.
            TransactionScopeError: inside a transaction.
        """
        _refuse_in(self._tx, "AgentSystemRef.update_metadata")
        return self._system.update_metadata(agent_id, patch)

    def parent_of(self, agent_id: str) -> str | None:
        """The id of ``agent_id``'s parent, or None.

        Raises:
            UnknownAgentError: no agent has the id.
            AgentClosedError: the system is closing or closed.
        """
        return self._system.parent_of(agent_id)

    def children_of(self, agent_id: str) -> list[str]:
        """The ids of the live agents created with ``agent_id`` as their parent, sorted.

        Raises:
            UnknownAgentError: no agent has the id.
            AgentClosedError: the system is closing or closed.
        """
        return self._system.children_of(agent_id)


def make_agent_ref(system: SystemPort, acceptance: AcceptancePort, agent_id: str) -> AgentRef:
    """The :class:`AgentRef` of ``agent_id`` outside any transaction (the system builds them; users
    resolve them).
    """
    return AgentRef(system, acceptance, agent_id, _token=_UNSET)


def make_system_ref(
    system: SystemPort, acceptance: AcceptancePort, agent_id: str | None
) -> AgentSystemRef:
    """The :class:`AgentSystemRef` seen from agent ``agent_id`` (None: from outside any agent)."""
    return AgentSystemRef(system, acceptance, agent_id, _token=_UNSET)
