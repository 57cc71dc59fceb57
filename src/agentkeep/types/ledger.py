"""The session event ledger's vocabulary (the wire's ``SessionEvent``).

One :class:`SessionEvent` is one committed fact about one session (an agent): its
``sequence`` is dense from 1 per session and never reused, and it committed in the same
transaction as the fact it reports. ``docs/ledger.md`` lists the types and where each is
appended. Event data is a JSON object of at most ``max_event_bytes`` encoded bytes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import msgspec

from agentkeep.types.content import AgentMessage, AssistantBlock, SystemMessage
from agentkeep.types.parts import MessageRole, assistant_json, message_json, parts_of
from agentkeep.types.records import (
    BlockRecord,
    ConversationRecord,
    JSONObject,
    SystemRecord,
    ToolRecord,
    UserRecord,
)

#: The default bound on one event's encoded ``data`` (the wire's ``maxEventBytes``).
DEFAULT_MAX_EVENT_BYTES: Final = 1024 * 1024
#: The default bound on one input message's encoded JSON (the wire's ``maxInputBytes``).
DEFAULT_MAX_INPUT_BYTES: Final = 512 * 1024
#: The most events one ``events`` page returns (on the wire ``limit`` maximum 1000).
MAX_EVENTS_PAGE: Final = 1000

# The durable event types (the wire names ``message``; the others are agentkeep's facts).
MESSAGE_ACCEPTED: Final = "message.accepted"  # a send/steer durably queued
MESSAGE: Final = "message"  # a message entered the conversation (the wire's type, docs/ledger.md)
ASSISTANT_BLOCK: Final = "assistant.block"  # a finished assistant block
RESPONSE_END: Final = "response.end"  # a response ended (its measurement)
TOOL_BATCH: Final = "tool.batch"  # a tool batch dispatched (durable before any call runs)
TOOL_RESULT: Final = "tool.result"  # one tool result entered the conversation
FAILURE_NOTE: Final = "failure.note"  # a failed turn's note
COMPACTION: Final = "compaction"  # history replaced by a compaction (archived epoch)
MODEL_SWITCH: Final = "model.switch"  # the provider/model or profile changed (reset or not)
METADATA_CHANGED: Final = "metadata.changed"  # the session's metadata was merged
SETTLED: Final = "settled"  # the run settled: nothing owed
#: The wire's ephemeral streaming type: never stored, never sequenced.
TEXT_DELTA: Final = "text.delta"

EVENT_TYPES: Final = (
    MESSAGE_ACCEPTED,
    MESSAGE,
    ASSISTANT_BLOCK,
    RESPONSE_END,
    TOOL_BATCH,
    TOOL_RESULT,
    FAILURE_NOTE,
    COMPACTION,
    MODEL_SWITCH,
    METADATA_CHANGED,
    SETTLED,
)


class SessionEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One committed ledger entry of a session.

    ``turn_id`` names the turn the fact belongs to once turns exist (None until then, and for
    facts outside any turn). An *ephemeral* event (``text.delta``, delivered live only to a
    subscription made with ``ephemeral=True``) is never stored: its ``sequence`` is 0.
    """

    session_id: str
    sequence: int
    type: str
    data: JSONObject
    created_at_ms: int
    turn_id: str | None = None

    @property
    def ephemeral(self) -> bool:
        """True for a live-only event: not stored, no sequence, never replayed."""
        return self.sequence == 0


__all__ = [
    "ASSISTANT_BLOCK",
    "COMPACTION",
    "DEFAULT_MAX_EVENT_BYTES",
    "DEFAULT_MAX_INPUT_BYTES",
    "EVENT_TYPES",
    "FAILURE_NOTE",
    "MAX_EVENTS_PAGE",
    "MESSAGE",
    "MESSAGE_ACCEPTED",
    "METADATA_CHANGED",
    "MODEL_SWITCH",
    "RESPONSE_END",
    "SETTLED",
    "TEXT_DELTA",
    "TOOL_BATCH",
    "TOOL_RESULT",
    "SessionEvent",
    "assistant_event",
    "record_event",
]


def assistant_event(blocks: Iterable[AssistantBlock]) -> dict[str, object]:
    """The data of the ``message`` event reporting a complete assistant response:
    ``{"role": "assistant", "message": <an AgentMessage>}`` (a driver's returned or
    emitted message is reported the same way)."""
    return {"role": "assistant", "message": assistant_json(blocks)}


def record_event(record: ConversationRecord) -> tuple[str, dict[str, object]]:
    """The event type and data reporting one appended conversation record."""
    match record:
        case UserRecord(message_id=message_id, message=message, metadata=metadata):
            role: MessageRole = "system" if isinstance(message, SystemMessage) else "user"
            data: dict[str, object] = {
                "message_id": message_id,
                "role": role,
                "message": message_json(role, message.content),
            }
            if isinstance(message, AgentMessage):  # another agent's: a user message by it
                data["author"] = msgspec.to_builtins(message.author)
            if metadata is not None:
                data["metadata"] = metadata
            if record.profile is not None:
                data["profile"] = record.profile
            return MESSAGE, data
        case BlockRecord(block=block):
            return ASSISTANT_BLOCK, {"block": msgspec.to_builtins(block)}
        case ToolRecord(message=message):
            return TOOL_RESULT, {
                "call_id": message.call_id,
                "is_error": message.is_error,
                "parts": [msgspec.to_builtins(part) for part in parts_of(message.content)],
            }
        case SystemRecord(message=message, reason="failure"):
            return FAILURE_NOTE, {"message": message_json("system", message.content)}
        case SystemRecord(message=message, reason=reason):
            return MESSAGE, {
                "role": "system",
                "reason": reason,
                "message": message_json("system", message.content),
            }
    return MESSAGE, {"record": msgspec.to_builtins(record)}
