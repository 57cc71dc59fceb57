"""``AgentSystem.base_state`` / ``update_base_state`` and ``create``'s initial state: an
agent's own instructions and tools (``runtime.base_state`` holds the rule and the store)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentkeep.errors import UnknownAgentError
from agentkeep.persistence.interface import Transaction
from agentkeep.runtime import base_state
from agentkeep.runtime.base_state import AgentBaseState, StateDefaults
from agentkeep.sessions import setup as session_setup
from agentkeep.sessions import tables as session_tables

if TYPE_CHECKING:
    from agentkeep.agent_system._internals import SystemInternals


def check(parts: SystemInternals, instructions: object, tools: object) -> dict[str, object]:
    """The overrides ``instructions`` / ``tools`` ask for (``UNSET``: keep), checked against
    the tools the system offers (``InvalidConfigError`` otherwise)."""
    offered = session_setup.offered_ids(parts.tools, parts.features)
    return base_state.check_update(instructions, tools, offered)


def defaults_of(tx: Transaction, parts: SystemInternals, agent_id: str) -> StateDefaults:
    """The agent's default state: its pinned revision's instructions and tools, else the
    system's instructions and every tool. Raises ``UnknownAgentError``."""
    if tx.agents.get(agent_id) is None:
        raise UnknownAgentError(agent_id)
    pinned = session_tables.pinned_definition(tx, agent_id)
    if pinned is None:
        return StateDefaults(instructions=parts.args.instructions)
    tools = session_setup.selection(pinned.toolbox.tool_ids, parts.tools, parts.features)
    return StateDefaults(instructions=pinned.instructions, tools=tools)


def read(parts: SystemInternals, agent_id: str) -> AgentBaseState:
    """The agent's base state in effect."""
    return parts.reads.read(
        lambda tx: base_state.read(tx, agent_id, defaults_of(tx, parts, agent_id))
    )


def update(
    parts: SystemInternals, agent_id: str, instructions: object, tools: object
) -> AgentBaseState:
    """Store the agent's new overrides (one transaction) and return its state in effect."""
    patch = check(parts, instructions, tools)

    def work(tx: Transaction) -> AgentBaseState:
        defaults = defaults_of(tx, parts, agent_id)
        base_state.write(tx, agent_id, patch)
        return base_state.read(tx, agent_id, defaults)

    with parts.admission.operation():
        return parts.store.transact(work)
