"""One tool batch's bookkeeping (pure): which calls run, which results are ready, and the
strict batch order in which results are committed (invariant I14)."""

from __future__ import annotations

from agentkeep.loop.effects import ToolRun
from agentkeep.types import TextBlock, ToolResultMessage
from agentkeep.types.records import PendingToolCall


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
        # Lifetime flags of the running calls' tools (told by ``ToolLifetimes``).
        self.steerable: set[str] = set()
        self.reloadable: set[str] = set()
        # Reloadable calls a drain left without a result: pending for the next process.
        self.parked: set[str] = set()

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
        """Answer every still-running (or parked) call with an error now; return their ids
        (to cancel).

        The aborted tools keep running until they notice; their late results are ignored.
        """
        aborted = self.interrupt(self.running | self.parked, text)
        self.parked.clear()
        return aborted

    def interrupt(self, internal_ids: set[str], text: str) -> tuple[str, ...]:
        """Answer those of ``internal_ids`` still running (or parked) with the error
        ``text`` now; return their ids, in call order (to cancel)."""
        answered = tuple(
            c.internal_id
            for c in self.calls
            if c.internal_id in internal_ids and c.internal_id in self.running | self.parked
        )
        for call in self.calls:
            if call.internal_id in answered:
                self.results[call.internal_id] = ToolResultMessage(
                    call_id=call.call.call_id, content=(TextBlock(text=text),), is_error=True
                )
                self.running.discard(call.internal_id)
                self.parked.discard(call.internal_id)
        return answered

    def park(self, internal_ids: set[str]) -> tuple[str, ...]:
        """Stop waiting for those of ``internal_ids`` still running, leaving them without a
        result (a drain's reloadable calls); return their ids, in call order (to cancel)."""
        parked = tuple(
            c.internal_id for c in self.calls if c.internal_id in internal_ids & self.running
        )
        self.running.difference_update(parked)
        self.parked.update(parked)
        return parked

    @property
    def stalled(self) -> bool:
        """Nothing runs and the next result to commit is a parked call's: this process can
        take the batch no further."""
        return (
            not self.done
            and not self.running
            and self.calls[self.next_index].internal_id in self.parked
        )

    def unclaimed(self) -> tuple[tuple[PendingToolCall, ToolResultMessage], ...]:
        """The results in memory behind the next one to commit that are not durable yet."""
        return tuple(
            (c, self.results[c.internal_id])
            for c in self.calls[self.next_index :]
            if c.committed is None and c.internal_id in self.results
        )
