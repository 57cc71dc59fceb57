"""Compacting a session now and saying what it did: the one implementation behind the
daemon's ``POST /v1/sessions/:id/compact`` with ``wait: true`` and the direct
:class:`~agentkeep.mcp.backend.SystemBackend`, so ``agentkeep session compact`` prints the same in
both modes."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Literal, cast

import msgspec

if TYPE_CHECKING:
    from agentkeep.agent_system._facade import AgentSystem

AgentState = Literal["running", "owes_work", "idle"]


class Compaction(msgspec.Struct, frozen=True, kw_only=True):
    """A finished compaction: the context size before it (None while unknown), the
    messages left in view, and the agent's state after it."""

    context_tokens_before: int | None
    messages: int
    state: AgentState


def compact_now(system: AgentSystem, agent_id: str, *, timeout_seconds: float) -> Compaction:
    """Compact the session's context, wait for the outcome and for the agent to settle
    (both within ``timeout_seconds``).

    Raises:
        UnknownAgentError: no such session (agent).
        CompactionFailedError: the compaction failed or was not confirmed.
        TimeoutError: no outcome within ``timeout_seconds`` (it goes on).
    """
    deadline = time.monotonic() + timeout_seconds
    before = system.context_tokens(agent_id)
    system.compact(agent_id, wait=True, timeout_seconds=timeout_seconds)
    # The outcome is known a moment before the agent's step ends: let it settle (within
    # the same bound; work that goes on past it is reported as "running").
    system.wait_for_idle(agent_id, timeout_seconds=max(0.0, deadline - time.monotonic()))
    return Compaction(
        context_tokens_before=before,
        messages=len(system.transcript(agent_id)),
        state=cast(AgentState, system.state(agent_id)),  # its three answers
    )
