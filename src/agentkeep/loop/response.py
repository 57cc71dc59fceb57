"""Assembling one streamed response into finished blocks (pure).

Decisions (a provider's stream events leave them open):

- ``block_start … block_reset`` discards that attempt: blocks finished inside an open attempt
  are held back and released only by ``block_stop`` (or by the terminal ``done``, which closes
  an attempt the provider forgot to stop). So a retried attempt never leaves its first try's
  blocks in the history, and history never holds output the model took back.
- Server tool results (``toolcall_result_*``) are kept as ``ServerToolResultBlock`` in the
  assistant message, so a provider that needs them on replay gets them back; they are never
  answered by the agent.
- A call id finished twice in one response is kept once (the first); the second is dropped.
- An unfinished block (no ``*_end`` before ``done``) is dropped everywhere.
"""

from __future__ import annotations

from agentkeep.types import (
    AssistantBlock,
    BlockReset,
    BlockStart,
    BlockStop,
    Done,
    ReasoningBlock,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    ServerToolResultBlock,
    StreamEvent,
    TextBlock,
    TextDelta,
    TextEnd,
    TextStart,
    ToolCallBlock,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolResultDelta,
    ToolResultEnd,
    ToolResultStart,
)

# The pieces a block streams in: most of a response's events, and none finishes a block
# (its end event carries the whole of it).
_DELTAS = (TextDelta, ReasoningDelta, ToolCallDelta, ToolResultDelta)


class ResponseAssembler:
    """Feeds on stream events; hands back the blocks that are finished and final."""

    def __init__(self) -> None:
        self._in_attempt = False
        self._tentative: list[AssistantBlock] = []
        self._starts: dict[str, ToolCallStart] = {}
        self._result_vendor: dict[str, str | None] = {}
        self._finished_ids: set[str] = set()
        self._attempt_call_ids: set[str] = set()  # call ids finished inside the open attempt
        self.blocks: list[AssistantBlock] = []  # released blocks, in release order
        self.done: Done | None = None

    @property
    def client_calls(self) -> list[ToolCallBlock]:
        """Released client tool calls (server calls excluded), in release order."""
        return [b for b in self.blocks if isinstance(b, ToolCallBlock) and not b.server]

    def feed(self, event: StreamEvent) -> list[AssistantBlock]:
        """Take one event; return the blocks it made final (to persist now, in order)."""
        if self.done is not None or isinstance(event, _DELTAS):
            return []  # nothing after the terminal event counts; a delta finishes nothing
        finished: AssistantBlock | None = None
        match event:
            case BlockStart():
                self._in_attempt = True
                self._tentative = []
            case BlockStop():
                return self._release_attempt()
            case BlockReset():
                self._in_attempt = False
                self._tentative = []
                self._finished_ids -= self._attempt_call_ids  # the retry may finish them again
                self._attempt_call_ids = set()
            case TextStart() | ReasoningStart():
                pass
            case TextEnd(text=text):
                finished = TextBlock(text=text)
            case ReasoningEnd(text=text, reasoning=reasoning, vendor=vendor):
                finished = ReasoningBlock(text=text, reasoning=reasoning, vendor=vendor)
            case ToolCallStart(call_id=call_id):
                self._starts.setdefault(call_id, event)
            case ToolCallEnd(call_id=call_id, arguments=arguments, incomplete=incomplete):
                start = self._starts.get(call_id)
                if call_id in self._finished_ids:
                    return []  # a duplicate call id: kept once
                self._finished_ids.add(call_id)
                if self._in_attempt:
                    self._attempt_call_ids.add(call_id)
                finished = ToolCallBlock(
                    call_id=call_id,
                    name=start.name if start else "",
                    namespace=start.namespace if start else None,
                    arguments=arguments,
                    incomplete=incomplete,
                    server=start.server if start else False,
                    vendor=start.vendor if start else None,
                )
            case ToolResultStart(call_id=call_id, vendor=vendor):
                self._result_vendor[call_id] = vendor
            case ToolResultEnd(call_id=call_id):
                finished = ServerToolResultBlock(
                    call_id=call_id,
                    content=event.content,
                    is_error=event.is_error,
                    incomplete=event.incomplete,
                    vendor=self._result_vendor.get(call_id),
                )
            case Done():
                self.done = event
                return self._release_attempt()
            case _:
                pass
        if finished is None:
            return []
        if self._in_attempt:
            self._tentative.append(finished)
            return []
        self.blocks.append(finished)
        return [finished]

    def _release_attempt(self) -> list[AssistantBlock]:
        released, self._tentative = self._tentative, []
        self._in_attempt = False
        self._attempt_call_ids = set()
        self.blocks.extend(released)
        return released
