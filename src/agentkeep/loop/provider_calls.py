"""Which provider-tool calls of one response hide something (pure): the loop's side of
``agentkeep.tools.provider_tools``.

A *server call* here is a call of a provider tool: its block or event has ``server`` set. The
content types keep the vendors' word ("server tool", Anthropic's ``server_tool_use``) because
``server`` is a field name stored in every persisted ``ToolCallBlock``.

A provider tool declared ``visible_to_user=False`` has its live call/result events kept from the
``on_event`` observers; one declared ``persist_in_history=False`` has its call and result
blocks kept out of the published history (they stay in the private model context). A server
call is named only by its ``toolcall_start``; every later event and block carries its call id.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import msgspec

from agentkeep.types import (
    AssistantBlock,
    ServerToolResultBlock,
    StreamEvent,
    ToolCallBlock,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolResultDelta,
    ToolResultEnd,
    ToolResultStart,
)

ToolKey = tuple[str | None, str]  # (namespace, name)


class ProviderToolPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """What the loop hides, by provider tool: pure data, fixed when the system opens."""

    hidden: frozenset[ToolKey] = frozenset()  # visible_to_user=False
    private: frozenset[ToolKey] = frozenset()  # persist_in_history=False


NO_PROVIDER_TOOLS = ProviderToolPolicy()

_CALL_EVENTS = (
    ToolCallStart,
    ToolCallDelta,
    ToolCallEnd,
    ToolResultStart,
    ToolResultDelta,
    ToolResultEnd,
)


@dataclass(slots=True)
class ProviderCalls:
    """One response's server calls that hide something, by the provider's call id (a
    response's server call is named only by its ``toolcall_start``)."""

    policy: ProviderToolPolicy = NO_PROVIDER_TOOLS
    hidden: set[str] = field(default_factory=set)
    private: set[str] = field(default_factory=set)

    def observe(self, event: StreamEvent) -> bool:
        """Note a server call's start; True if ``event`` may be observed live."""
        if isinstance(event, ToolCallStart) and event.server:
            key = (event.namespace, event.name)
            if key in self.policy.hidden:
                self.hidden.add(event.call_id)
            if key in self.policy.private:
                self.private.add(event.call_id)
        return not (isinstance(event, _CALL_EVENTS) and event.call_id in self.hidden)

    def private_ids(self, blocks: Iterable[AssistantBlock]) -> tuple[str, ...]:
        """The call ids among ``blocks`` whose call and result stay out of the history."""
        if not self.private:
            return ()  # the common case: this response called no such tool
        ids = {
            b.call_id
            for b in blocks
            if isinstance(b, ToolCallBlock | ServerToolResultBlock) and b.call_id in self.private
        }
        return tuple(sorted(ids))


def is_private(block: AssistantBlock, private_ids: Iterable[str]) -> bool:
    """Whether ``block`` is the call or result of a server call kept out of the history."""
    if isinstance(block, ToolCallBlock) and not block.server:
        return False  # an executable call never hides
    return isinstance(block, ToolCallBlock | ServerToolResultBlock) and block.call_id in set(
        private_ids
    )
