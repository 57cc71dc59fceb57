"""Pure readings of a conversation: what is unanswered, what is owed, what the provider sees."""

from __future__ import annotations

from collections.abc import Sequence

from agentkeep.loop.requests import without_requests
from agentkeep.model import (
    AssistantMessage,
    BlockRecord,
    CompactionRecord,
    ConversationRecord,
    Message,
    PendingToolCall,
    SystemRecord,
    ToolCallBlock,
    ToolRecord,
    ToolResultMessage,
    UserRecord,
    rebuild_messages,
)


def unanswered_calls(records: Sequence[ConversationRecord]) -> list[ToolCallBlock]:
    """Client tool calls in the conversation that no tool record answers, in call order.

    Server calls are the provider's and are never answered by the agent. Scans the records
    directly (a compaction restarts the scan from its replacement messages).
    """
    calls: dict[str, ToolCallBlock] = {}

    def note(block: object) -> None:
        if isinstance(block, ToolCallBlock) and not block.server:
            calls.setdefault(block.call_id, block)

    for record in records:
        if isinstance(record, BlockRecord):
            note(record.block)
        elif isinstance(record, ToolRecord):
            calls.pop(record.message.call_id, None)
        elif isinstance(record, CompactionRecord):
            calls = {}
            for message in record.messages:
                if isinstance(message, AssistantMessage):
                    for block in message.content:
                        note(block)
                elif isinstance(message, ToolResultMessage):
                    calls.pop(message.call_id, None)
    return list(calls.values())


def undispatched_calls(
    records: Sequence[ConversationRecord], pending: Sequence[PendingToolCall]
) -> list[ToolCallBlock]:
    """Unanswered calls with no durable batch entry.

    The batch commit precedes every execution, so such a call has certainly not run: it is
    recovered as the batch it never got to be.
    """
    dispatched = {p.call.call_id for p in pending}
    return [c for c in unanswered_calls(records) if c.call_id not in dispatched]


def tail_owes_answer(records: Sequence[ConversationRecord]) -> bool:
    """Whether the last durable record is a question nobody answered.

    A consumed message, a tool result or a failure note is owed an answer; a compaction is
    owed one only when the rewrite recorded that it kept an unanswered message.
    """
    if not records:
        return False
    last = records[-1]
    if isinstance(last, UserRecord | ToolRecord | SystemRecord):
        return True
    if isinstance(last, CompactionRecord):
        return last.owes_answer
    return False


def ends_in_failure_note(records: Sequence[ConversationRecord]) -> bool:
    """Whether the conversation ends in "The last turn failed: …" (still owed an answer)."""
    return (
        bool(records) and isinstance(records[-1], SystemRecord) and records[-1].reason == "failure"
    )


def provider_view(records: Sequence[ConversationRecord]) -> tuple[Message, ...]:
    """The conversation as the provider must see it: each tool result directly after the
    assistant message that issued its call, anything in between kept after the results.

    History stays append-only; a result that had to be written later (a stranded call
    recovered on load) is shown beside its call here. A user message's tool request block is
    control data, never context: the provider gets the message's ordinary content, and
    nothing for a tool-only message (the runtime's call and its result follow it).
    """
    messages = [
        shown
        for message in rebuild_messages(list(records))
        if (shown := without_requests(message)) is not None
    ]
    results: dict[str, ToolResultMessage] = {}
    issued: set[str] = set()
    for message in messages:
        if isinstance(message, AssistantMessage):
            issued.update(
                b.call_id for b in message.content if isinstance(b, ToolCallBlock) and not b.server
            )
        elif isinstance(message, ToolResultMessage) and message.call_id in issued:
            results.setdefault(message.call_id, message)
    view: list[Message] = []
    placed: set[str] = set()
    for message in messages:
        if isinstance(message, ToolResultMessage) and message.call_id in results:
            continue
        view.append(message)
        if isinstance(message, AssistantMessage):
            for block in message.content:
                if not isinstance(block, ToolCallBlock):
                    continue
                if block.call_id in results and block.call_id not in placed:
                    placed.add(block.call_id)
                    view.append(results[block.call_id])
    return tuple(view)
