"""An agent's own base state: the instructions and tools it starts every request from.

Each agent has one (the wire's ``AgentBaseState``): ``instructions`` (the system prompt the
features' ``instructions`` hooks extend) and ``tools`` (the ids of the tools it is offered,
which the features' ``tools`` hooks extend; None: every tool the system offers). Until it
is changed it is the agent's *default*: a session's pinned revision's instructions and
``toolbox.toolIds``, else the system's ``open(instructions=)`` and every tool.

What an agent changes is stored durably, as the fields it overrides, in its own key-value
area (:data:`STATE_AREA`, under the agent's prefix, so re-creating the id wipes it), set at
``create(instructions=, tools=)`` in the creating transaction and by
``update_base_state``. The agent uses it for each request it prepares and each tool batch
it starts, so a change takes effect at its next request (its model session is reopened
for the new instructions and tools); a request already sent keeps what it was sent with.

The agent keeps what it read (:class:`BaseStateSource`) until a base state is written in
this process: every :func:`write` counts, once its transaction committed, in :data:`WRITES`,
and a source whose reading predates the count reads again. Only the process that owns an
agent writes its state (the store's lock; a partition's owner on PostgreSQL), and a source
lives no longer than its agent's actor, so the count sees every write the source could miss.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import msgspec

from agentkeep.errors import InvalidConfigError
from agentkeep.persistence.interface import StoreHandle, Transaction
from agentkeep.persistence.kv import ScopedKV

#: The agent's key-value area holding its base state overrides.
STATE_AREA = "state"
_KEY = "base"


class AgentBaseState(msgspec.Struct, frozen=True, kw_only=True):
    """An agent's base state, as in effect (its overrides over its default).

    Attributes:
        instructions: The system prompt its requests start from, before the features'
            ``instructions`` hooks append theirs.
        tools: The ids (``name`` or ``namespace.name``) of the only tools it is offered, the
            system's and the features' alike; None: every tool the system offers. An empty
            tuple offers none.
    """

    instructions: str
    tools: tuple[str, ...] | None = None


class StateDefaults(msgspec.Struct, frozen=True, kw_only=True):
    """An agent's default base state (its pinned revision's, or the system's)."""

    instructions: str
    tools: frozenset[str] | None = None


def check_update(instructions: object, tools: object, offered: Sequence[str]) -> dict[str, object]:
    """The overrides to store for ``instructions`` / ``tools`` (``msgspec.UNSET``: leave it).

    Raises:
        InvalidConfigError: ``instructions`` is not a string, ``tools`` not None or a list of
            ids, or an id names no tool the system offers (the message lists them).
    """
    patch: dict[str, object] = {}
    if instructions is not msgspec.UNSET:
        if not isinstance(instructions, str):
            raise InvalidConfigError(f"instructions must be a string, got {instructions!r}")
        patch["instructions"] = instructions
    if tools is not msgspec.UNSET:
        if tools is not None:
            if isinstance(tools, str | bytes) or not isinstance(tools, Sequence):
                raise InvalidConfigError(f"tools must be a list of tool ids, got {tools!r}")
            for index, wanted in enumerate(tools):
                if wanted not in offered:
                    raise InvalidConfigError(
                        f'tools[{index}]: no tool "{wanted}" is offered by this system '
                        f"(its tools: {', '.join(sorted(offered)) or 'none'})"
                    )
            tools = list(dict.fromkeys(tools))
        patch["tools"] = tools
    return patch


class WriteCount:
    """How many base-state writes committed in this process (any agent, any store): a
    reading taken at count ``n`` is current while the count is still ``n``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.value = 0  # read without the lock: one int

    def bump(self) -> None:
        with self._lock:
            self.value += 1


#: Every :func:`write` in this process, counted after its COMMIT (see the module).
WRITES = WriteCount()


def _scope(agent_id: str) -> tuple[str, ...]:
    return ("agent", agent_id, STATE_AREA)


def write(tx: Transaction, agent_id: str, patch: dict[str, object]) -> None:
    """Merge ``patch`` (from :func:`check_update`) into the agent's stored overrides."""
    if not patch:
        return
    kv = ScopedKV.in_transaction(tx, *_scope(agent_id))
    stored = kv.read(_KEY) or {}
    kv.write(_KEY, {**stored, **patch})
    tx.after_commit(WRITES.bump)


def effective(overrides: object, defaults: StateDefaults) -> AgentBaseState:
    """The state in effect: ``overrides`` (as stored; None: none) over ``defaults``."""
    stored = overrides if isinstance(overrides, dict) else {}
    instructions = stored.get("instructions", defaults.instructions)
    if "tools" in stored:
        tools = stored["tools"]
        return AgentBaseState(
            instructions=instructions, tools=None if tools is None else tuple(tools)
        )
    default = None if defaults.tools is None else tuple(sorted(defaults.tools))
    return AgentBaseState(instructions=instructions, tools=default)


def read(tx: Transaction, agent_id: str, defaults: StateDefaults) -> AgentBaseState:
    """The agent's state in effect, read in ``tx``."""
    return effective(ScopedKV.in_transaction(tx, *_scope(agent_id)).read(_KEY), defaults)


class BaseStateSource:
    """One agent's base state as its loop reads it: the stored overrides over its defaults,
    read through the store when a base state was written since its last reading
    (:meth:`current`; see the module). Any thread may use it."""

    def __init__(self, store: StoreHandle, agent_id: str, defaults: StateDefaults) -> None:
        self._kv = ScopedKV.through(store, *_scope(agent_id))
        self.defaults = defaults
        # (the count its reading was taken at, the state): replaced whole, never mutated
        self._reading: tuple[int, AgentBaseState] | None = None

    def current(self) -> AgentBaseState:
        """The state in effect now (read again only if a base state was written since)."""
        reading = self._reading
        count = WRITES.value  # before the read: a write after it forces the next one
        if reading is not None and reading[0] == count:
            return reading[1]
        state = effective(self._kv.read(_KEY), self.defaults)
        self._reading = (count, state)
        return state

    def selection(self) -> frozenset[str] | None:
        """The ids of the only tools offered now (None: every tool)."""
        return selection_of(self.current())


def selection_of(state: AgentBaseState) -> frozenset[str] | None:
    """The ids of the only tools ``state`` offers (None: every tool)."""
    return None if state.tools is None else frozenset(state.tools)
