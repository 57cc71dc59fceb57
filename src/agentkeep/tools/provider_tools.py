"""Provider-owned tools ("server tools") and what they may hide.

A :class:`ProviderTool` is a tool the provider runs itself (a web search, a code sandbox): the
provider is told about it (``ToolDescriptor.server``), its calls and results come back in the
response stream, and agentkeep never executes or answers them. Unlike an executable
:class:`~agentkeep.tools.Tool`, a provider tool may hide:

- ``visible_to_user=False``: its live call and result events (``toolcall_start/delta/end``
  and ``toolcall_result_start/delta/end`` with its call id) are not handed to the features'
  ``on_event`` observers, the live stream of a response.
- ``persist_in_history=False``: its call and result blocks are not published: no
  ``assistant.block`` ledger event (``system.events`` / ``subscribe``), and they are left out
  of :meth:`~agentkeep.Agent.transcript` and :meth:`~agentkeep.Agent.history`. They stay in
  the private model context: stored with the conversation and sent to the provider on every
  later request, as any block is.

Executable tools cannot hide from correctness or security observers, so
:class:`~agentkeep.tools.Tool` refuses both flags.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from agentkeep.errors import ToolDefinitionError
from agentkeep.loop.provider_calls import ProviderToolPolicy, ToolKey
from agentkeep.tools.definition import NAME, ToolSet
from agentkeep.types import ToolDescriptor


@dataclass(frozen=True, kw_only=True)
class ProviderTool:
    """A provider-owned tool: declared to the provider, never executed by agentkeep.

    Pass it to ``AgentSystem.open(provider_tools=[...])``.

    Attributes:
        name: ``[A-Za-z0-9_-]{1,64}``; no executable tool of the system may share its
            ``(namespace, name)``.
        server: The provider's own descriptor of the tool, with at least its ``"type"``
            (e.g. ``{"type": "web_search_20250305"}``); sent to the provider as given.
        description: What the model is told the tool does (if the provider takes one).
        namespace: Optional grouping, as for executable tools.
        visible_to_user: False: its live call/result events are not observed (``on_event``).
        persist_in_history: False: its call and result are not published to the history
            (ledger events, transcript, history reads); the provider still sees them.
    """

    name: str
    server: Mapping[str, Any]
    description: str | None = None
    namespace: str | None = None
    visible_to_user: bool = True
    persist_in_history: bool = True
    _server: dict[str, Any] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME.match(self.name):
            raise ToolDefinitionError(
                f"Provider tool name {self.name!r} must match {NAME.pattern}."
            )
        if self.namespace is not None and (
            not isinstance(self.namespace, str) or not NAME.match(self.namespace)
        ):
            raise ToolDefinitionError(
                f'Namespace {self.namespace!r} of provider tool "{self.name}" must match '
                f"{NAME.pattern}."
            )
        if not isinstance(self.server, Mapping) or not isinstance(self.server.get("type"), str):
            raise ToolDefinitionError(
                f'Provider tool "{self.name}" needs the provider\'s descriptor as a mapping with '
                f'a "type" string (e.g. {{"type": "web_search_20250305"}}), got {self.server!r}.'
            )
        for flag in ("visible_to_user", "persist_in_history"):
            if not isinstance(getattr(self, flag), bool):
                raise ToolDefinitionError(
                    f'{flag} of provider tool "{self.name}" must be True or False, '
                    f"got {getattr(self, flag)!r}."
                )
        try:
            copied = msgspec.json.decode(msgspec.json.encode(dict(self.server)))
        except (TypeError, ValueError) as error:
            raise ToolDefinitionError(
                f'The descriptor of provider tool "{self.name}" is not JSON: {error}'
            ) from error
        object.__setattr__(self, "_server", copied)

    @property
    def key(self) -> ToolKey:
        """``(namespace, name)``: what a server call of the stream names."""
        return (self.namespace, self.name)

    def descriptor(self) -> ToolDescriptor:
        """What a provider is told about this tool (``server`` set)."""
        return ToolDescriptor(
            name=self.name,
            description=self.description,
            namespace=self.namespace,
            server=dict(self._server),
        )


def policy_of(tools: Iterable[ProviderTool]) -> ProviderToolPolicy:
    """What the loop hides for ``tools`` (``agentkeep.loop.provider_calls``)."""
    listed = list(tools)
    return ProviderToolPolicy(
        hidden=frozenset(t.key for t in listed if not t.visible_to_user),
        private=frozenset(t.key for t in listed if not t.persist_in_history),
    )


def check_provider_tools(tools: ToolSet, provider_tools: Sequence[ProviderTool]) -> None:
    """Refuse two tools sharing a ``(namespace, name)``: among ``provider_tools``, or with an
    executable tool of ``tools`` (the provider could not tell their calls apart).

    Raises:
        ToolDefinitionError: naming the shared name.
    """
    seen: set[ToolKey] = set()
    for each in provider_tools:
        if each.key in seen or tools.get(each.name, each.namespace) is not None:
            where = f' in namespace "{each.namespace}"' if each.namespace else ""
            raise ToolDefinitionError(f'Tool "{each.name}"{where} is defined twice.')
        seen.add(each.key)


__all__ = ["ProviderTool", "check_provider_tools", "policy_of"]
