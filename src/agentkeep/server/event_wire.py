"""A ledger event's ``data`` as every surface shows it: the wire's camelCase keys and
the wire's message shape.

The ledger stores agentkeep's own events with snake_case keys (``message_id``, ``call_id``)
and keeps them so forever (it is append-only: nothing stored can be renamed), so the one
case convention of the wire is made here, at the edge, for every surface (REST, SSE, MCP,
the CLI's JSON): :func:`wire_event_data`.

- Keys of agentkeep's own events (``docs/ledger.md``, ``turn.*``) are camelCase, at every
  depth agentkeep owns. Values that are someone else's JSON keep their keys verbatim: a
  session's ``metadata`` and a metadata ``patch``, a tool call's ``arguments``, a data
  part's ``data``, an error's ``details``, a message's ``options``.
- Every ``message`` in them (a turn's ``result.message`` too) is the wire's
  ``AgentMessage`` (``types/parts.py``), whichever shape an older ledger stored. (A
  ``compaction`` event's ``messages`` are the conversation records it replaced, tool calls
  and all: shown as records, their keys camelCase.)
- An injected driver's own event types are shown exactly as it emitted them.
"""

from __future__ import annotations

from typing import Any, Final

from agentkeep.types import JSONObject
from agentkeep.types.ledger import EVENT_TYPES
from agentkeep.types.parts import as_wire_json
from agentkeep.types.turns import TURN_EVENT_PREFIX

#: Keys whose values are someone else's JSON: shown with their own keys, untouched.
OPAQUE_KEYS: Final = frozenset(
    {"metadata", "patch", "arguments", "data", "details", "options", "settings"}
)
#: Keys whose values are messages: shown as the wire's ``AgentMessage``.
_MESSAGE_KEYS: Final = frozenset({"message"})
_OWN: Final = frozenset(EVENT_TYPES)


def camel(key: str) -> str:
    """``message_id`` → ``messageId`` (a key without ``_`` is unchanged)."""
    head, *rest = key.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def wire_event_data(type: str, data: JSONObject) -> JSONObject:
    """``data`` of an event of ``type`` as the wire shows it (the module's rules)."""
    if type not in _OWN and not type.startswith(TURN_EVENT_PREFIX):
        return data  # an injected driver's own event: its data as it emitted it
    shown = _value(data)
    assert isinstance(shown, dict)  # an object stays an object
    return shown


def _value(value: Any, key: str | None = None) -> Any:
    if key in OPAQUE_KEYS:
        return value
    if key in _MESSAGE_KEYS:
        value = as_wire_json(value)
    if isinstance(value, dict):
        return {camel(k): _value(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_value(item) for item in value]
    return value


__all__ = ["OPAQUE_KEYS", "camel", "wire_event_data"]
