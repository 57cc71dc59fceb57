"""One tool batch's bookkeeping (pure): which calls run, which results are ready, and the
strict batch order in which results are committed (invariant 9)."""

from __future__ import annotations

from agentkeep.loop.effects import ToolRun
from agentkeep.model import PendingToolCall, TextBlock, ToolResultMessage


class ToolBatch:
    """Calls run in parallel; results commit one at a time, in call order.

    A result that finishes early waits until every earlier call has committed. A call whose
    result a tool already committed durably (``call.commit``) is not run again.
    """

    def __init__(self, calls: tuple[PendingToolCall, ...], *, resumed: bool) -> None:
        self.calls = sorted(calls, key=lambda c: c.index)
        self.resumed = resumed
        self.results: dict[str, ToolResultMessage] = {
            c.internal_id: c.committed for c in self.calls if c.committed is not None
        }
        self.running: set[str] = {c.internal_id for c in self.calls if c.committed is None}
        self.next_index = 0  # position in ``calls`` of the next result to commit
        self.committing = False

    @property
    def done(self) -> bool:
        return self.next_index >= len(self.calls)

    def runs(self) -> tuple[ToolRun, ...]:
        return tuple(
            ToolRun(internal_id=c.internal_id, call=c.call, resumed=self.resumed)
            for c in self.calls
            if c.internal_id in self.running
        )

    def finish(self, internal_id: str, result: ToolResultMessage) -> bool:
        """Record a finished call; False if it was not running (abandoned or unknown)."""
        if internal_id not in self.running:
            return False
        self.running.discard(internal_id)
        self.results[internal_id] = result
        return True

    def next_ready(self) -> tuple[PendingToolCall, ToolResultMessage] | None:
        if self.done:
            return None
        pending = self.calls[self.next_index]
        result = self.results.get(pending.internal_id)
        return None if result is None else (pending, result)

    def is_last(self, pending: PendingToolCall) -> bool:
        return pending is self.calls[-1]

    def committed_one(self) -> None:
        self.committing = False
        self.next_index += 1

    def abort_running(self, text: str) -> tuple[str, ...]:
        """Answer every still-running call with an error now; return their ids (to cancel).

        The aborted tools keep running until they notice; their late results are ignored.
        """
        aborted = tuple(c.internal_id for c in self.calls if c.internal_id in self.running)
        for call in self.calls:
            if call.internal_id in self.running:
                self.results[call.internal_id] = ToolResultMessage(
                    call_id=call.call.call_id, content=(TextBlock(text=text),), is_error=True
                )
        self.running.clear()
        return aborted
