"""Pure readings of a conversation: what is unanswered, what is owed, what the provider sees."""

from __future__ import annotations

from collections.abc import Sequence

from agentkeep.loop.requests import without_requests
from agentkeep.types import (
    AssistantBlock,
    AssistantMessage,
    Message,
    ToolCallBlock,
    ToolResultMessage,
)
from agentkeep.types.records import (
    BlockRecord,
    CompactionRecord,
    ConversationRecord,
    PendingToolCall,
    SystemRecord,
    ToolRecord,
    UserRecord,
    rebuild_messages,
)


def unanswered_calls(records: Sequence[ConversationRecord]) -> list[ToolCallBlock]:
    """Client tool calls in the conversation that no tool record answers, in call order.

    Server calls are the provider's and are never answered by the agent. Scans the records
    directly (a compaction restarts the scan from its replacement messages).
    """
    calls: dict[str, ToolCallBlock] = {}
    _scan_calls(calls, records)
    return list(calls.values())


def _scan_calls(calls: dict[str, ToolCallBlock], records: Sequence[ConversationRecord]) -> None:
    """Fold ``records`` into ``calls`` (the open calls so far, in call order)."""

    def note(block: object) -> None:
        if isinstance(block, ToolCallBlock) and not block.server:
            calls.setdefault(block.call_id, block)

    for record in records:
        if isinstance(record, BlockRecord):
            note(record.block)
        elif isinstance(record, ToolRecord):
            calls.pop(record.message.call_id, None)
        elif isinstance(record, CompactionRecord):
            calls.clear()
            for message in record.messages:
                if isinstance(message, AssistantMessage):
                    for block in message.content:
                        note(block)
                elif isinstance(message, ToolResultMessage):
                    calls.pop(message.call_id, None)


class _Seen:
    """Which records a cache has read, checked in constant time: the list it was handed, how
    long it was then, and its last record. Sound because the loop's records are only ever
    extended in place: any other change (a compaction, a reset, a reload) makes a new list
    (``Mirror.records``). Handed another list, a cache reads it whole."""

    __slots__ = ("last", "records", "size")

    def __init__(self) -> None:
        self.records: Sequence[ConversationRecord] | None = None
        self.size = 0
        self.last: ConversationRecord | None = None

    def grew(self, records: Sequence[ConversationRecord]) -> bool:
        """Whether ``records`` is the list seen, only extended since."""
        size = self.size
        return (
            records is self.records
            and len(records) >= size
            and (size == 0 or records[size - 1] is self.last)
        )

    def keep(self, records: Sequence[ConversationRecord]) -> None:
        self.records, self.size = records, len(records)
        self.last = records[-1] if records else None


class OpenCalls:
    """``unanswered_calls(records)`` for a conversation that grows by appending: the open
    calls of the records seen last time are kept and only the records after them are read
    (every turn scanned the whole history). Records that are not the list seen,
    extended (a compaction, a reset, a reload: ``_Seen``), are read again whole, so the
    answer is always exactly ``unanswered_calls(records)``."""

    def __init__(self) -> None:
        self._seen = _Seen()
        self._open: dict[str, ToolCallBlock] = {}

    def calls(self, records: Sequence[ConversationRecord]) -> list[ToolCallBlock]:
        """The client calls of ``records`` that no tool record answers, in call order."""
        if self._seen.grew(records):
            calls, suffix = dict(self._open), records[self._seen.size :]
        else:
            calls, suffix = {}, records
        _scan_calls(calls, suffix)
        self._seen.keep(records)
        self._open = calls
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
    owed one only when the rewrite recorded that it kept an unanswered message. The note
    that ended owed work (a ``settled`` system record) is that question's answer.
    """
    if not records:
        return False
    last = records[-1]
    if isinstance(last, SystemRecord):
        return last.reason != "settled"
    if isinstance(last, UserRecord | ToolRecord):
        return True
    if isinstance(last, CompactionRecord):
        return last.owes_answer
    return False


def ends_with_own_message(records: Sequence[ConversationRecord]) -> bool:
    """Whether the conversation ends with the model's own completed blocks (a request made
    now would end with an assistant message). A trailing compaction is continued as it
    stands, whatever its replacement ends with."""
    return bool(records) and isinstance(records[-1], BlockRecord)


def continued_blocks(records: Sequence[ConversationRecord]) -> tuple[AssistantBlock, ...]:
    """The published blocks of the cut responses a request made now continues, in order:
    the start of the assistant message its response completes (docs/turns.md).

    A response cut after completed content (a crash, or a stream that failed) is continued
    after the notice "Continue from where you left off." written with reason ``continue``;
    the notices queued for the same boundary follow it. So, from the end: notices, then a
    ``continue`` notice, then the cut response's blocks — and again, if that one continued
    another cut response. Anything else ends the message (a user message, a tool result, a
    compaction, a failure note, a notice whose run does not reach a ``continue``). Private
    blocks are in no message. Constant time when the conversation does not end in notices
    (the common path: it ends with the turn's input or a tool result).
    """
    carried: list[AssistantBlock] = []
    end = len(records)
    while True:
        at = end
        while at and isinstance(record := records[at - 1], SystemRecord):
            if record.reason != "notice":
                break
            at -= 1
        if not at or not _is_continue(records[at - 1]):
            return tuple(carried)
        end = start = at - 1
        while start and isinstance(records[start - 1], BlockRecord):
            start -= 1
        cut = [r.block for r in records[start:end] if isinstance(r, BlockRecord) and not r.private]
        carried[:0] = cut
        end = start


def _is_continue(record: ConversationRecord) -> bool:
    return isinstance(record, SystemRecord) and record.reason == "continue"


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
    return _view(records).messages


class _Part:
    """The provider view of a run of records, with what splicing it after others needs."""

    __slots__ = ("ends_in_assistant", "issued", "messages", "open", "results")

    def __init__(
        self,
        messages: tuple[Message, ...],
        issued: set[str],
        results: set[str],
        open: set[str],
        ends_in_assistant: bool,
    ) -> None:
        self.messages = messages
        self.issued = issued  # client calls issued in it
        self.results = results  # call ids of every tool result in it
        self.open = open  # issued calls whose result is not placed beside them in it
        self.ends_in_assistant = ends_in_assistant  # a following block would join it


def _view(records: Sequence[ConversationRecord]) -> _Part:
    rebuilt = rebuild_messages(list(records))
    messages = [shown for message in rebuilt if (shown := without_requests(message)) is not None]
    results: dict[str, ToolResultMessage] = {}
    issued: set[str] = set()
    every_result: set[str] = set()
    for message in messages:
        if isinstance(message, AssistantMessage):
            issued.update(
                b.call_id for b in message.content if isinstance(b, ToolCallBlock) and not b.server
            )
        elif isinstance(message, ToolResultMessage):
            every_result.add(message.call_id)
            if message.call_id in issued:
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
    ends = bool(rebuilt) and isinstance(rebuilt[-1], AssistantMessage)
    return _Part(tuple(view), issued, every_result, issued - placed, ends)


class ProviderViews:
    """``provider_view(records)`` for a conversation that grows by appending: the view of a
    prefix is kept and only the records after it are read again (rebuilding the
    whole view every inference made a step's cost grow with the history).

    The kept prefix is one whose view no later record can change: every call issued in it
    has its result placed in it. A later record is spliced after it only if it neither
    joins the prefix's last assistant message (a block right after one), nor replaces the
    history (a compaction), nor answers a call of the prefix. Records that are not the list
    seen, extended (a compaction, a reset, a reload: ``_Seen``), are read again whole, so
    the view is always exactly ``provider_view(records)``.
    """

    def __init__(self) -> None:
        self._prefix = _Seen()
        self._part = _Part((), set(), set(), set(), False)

    def view(self, records: Sequence[ConversationRecord]) -> tuple[Message, ...]:
        """The provider view of ``records`` (see :func:`provider_view`)."""
        size = self._prefix.size
        kept = self._part
        if size and self._prefix.grew(records):
            suffix = records[size:]
            if not suffix:
                return kept.messages
            joins = isinstance(suffix[0], BlockRecord) and kept.ends_in_assistant
            if not joins and not any(isinstance(r, CompactionRecord) for r in suffix):
                part = _view(suffix)
                if not (part.results & kept.issued):
                    messages = kept.messages + part.messages
                    if not part.open:
                        kept.issued |= part.issued
                        self._keep(records, messages, kept.issued, part.ends_in_assistant)
                    return messages
        whole = _view(records)
        if not whole.open:
            self._keep(records, whole.messages, whole.issued, whole.ends_in_assistant)
        return whole.messages

    def _keep(
        self,
        records: Sequence[ConversationRecord],
        messages: tuple[Message, ...],
        issued: set[str],
        ends_in_assistant: bool,
    ) -> None:
        self._prefix.keep(records)
        self._part = _Part(messages, issued, set(), set(), ends_in_assistant)
