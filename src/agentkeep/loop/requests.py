"""Tool request blocks ("SessionInputTool"): a queued user message may ask the
runtime to run one tool call before the model is asked.

Pure helpers shared by the consumption transaction (``plans``), the loop (``machine``) and
the provider view (``view``):

- an all-at-once batch ends at the first message with a request, so no later message can
  replace its settings or land between the call and its result;
- consuming that message appends its user record (the original message, block included:
  its delivery identity) and then the runtime's assistant call, under a fresh id;
- providers get the message's ordinary content only, and nothing for a tool-only message.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from agentkeep.types import (
    Message,
    QueueableMessage,
    ToolCallBlock,
    ToolCallRequestBlock,
    UserMessage,
    input_blocks,
)
from agentkeep.types.records import BlockRecord, ConversationRecord, QueuedMessage


def request_of(message: QueueableMessage) -> ToolCallRequestBlock | None:
    """The message's tool request, if it carries one (admission allows at most one)."""
    if not isinstance(message, UserMessage):
        return None
    for block in message.content:
        if isinstance(block, ToolCallRequestBlock):
            return block
    return None


def batch_through_request(entries: Sequence[QueuedMessage]) -> list[QueuedMessage]:
    """An all-at-once batch: the leading entries that select the first entry's profile, up to
    and including the first tool request. Entries of different profiles never share a batch:
    they may not share model context, so the next pass takes the rest."""
    if not entries:
        return []
    profile = entries[0].options.profile
    for index, entry in enumerate(entries):
        if entry.options.profile != profile:
            return list(entries[:index])
        if request_of(entry.message) is not None:
            return list(entries[: index + 1])
    return list(entries)


def requested_call(request: ToolCallRequestBlock, call_id: str) -> ToolCallBlock:
    """The assistant call the runtime records for ``request``."""
    return ToolCallBlock(
        call_id=call_id,
        name=request.name,
        namespace=request.namespace,
        arguments=msgspec.json.encode(request.arguments).decode(),
    )


def calls_recorded(records: Sequence[ConversationRecord]) -> list[ToolCallBlock]:
    """The client calls among ``records`` (what a consumption appended for a request)."""
    return [
        r.block
        for r in records
        if isinstance(r, BlockRecord) and isinstance(r.block, ToolCallBlock) and not r.block.server
    ]


def without_requests(message: Message) -> Message | None:
    """``message`` as a provider may see it: a user message loses its request block, and
    one left with nothing (a tool-only message) is left out."""
    if not isinstance(message, UserMessage):
        return message
    if request_of(message) is None:
        return message
    content = input_blocks(message.content)
    return UserMessage(content=content) if content else None
