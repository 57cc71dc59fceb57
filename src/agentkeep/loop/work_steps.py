"""The tool batch and compaction paths of the loop core."""

from __future__ import annotations

from collections.abc import Sequence

from agentkeep.loop.batch import ToolBatch
from agentkeep.loop.effects import (
    CancelTools,
    CompactionResolved,
    Emit,
    StartCompaction,
    StartTools,
)
from agentkeep.loop.events import CompactionFinished
from agentkeep.loop.plans import CommitToolResult, DispatchBatch, ReplaceWithCompaction, StageOwed
from agentkeep.loop.requests import calls_recorded
from agentkeep.loop.state import ABORTED_CALL, LoopState
from agentkeep.loop.view import provider_view
from agentkeep.model import (
    CompactionCancelled,
    CompactionCompleted,
    ConversationRecord,
    PendingToolCall,
    ToolCallEnd,
    ToolCallStart,
)


class WorkSteps(LoopState):
    def _start_batch(self, calls: list[PendingToolCall], *, resumed: bool) -> None:
        self._resume = None
        if resumed:
            if self.owed is None or self.owed.stage != "tools":
                self._commit(StageOwed(owed=self._owed("tools")))
            self._run_batch(tuple(calls), resumed=True)
        else:
            self._commit(DispatchBatch(calls=tuple(calls), owed=self._owed("tools")))

    def _run_batch(self, calls: tuple[PendingToolCall, ...], *, resumed: bool) -> None:
        batch = ToolBatch(calls, resumed=resumed)
        self._batch = batch
        if self._aborted:
            # Aborted while the dispatch committed: the batch is durable, but no call starts;
            # each is answered as aborted, in order, like a running call would be.
            batch.abort_running(ABORTED_CALL)
        runs = batch.runs()
        self._children.update(r.internal_id for r in runs)
        if runs:
            self._out.append(StartTools(runs=runs))
        self._pump_results()

    def _pump_results(self) -> None:
        batch = self._batch
        if batch is None or batch.committing:
            return
        ready = batch.next_ready()
        if ready is None:
            return
        pending, result = ready
        last = batch.is_last(pending)
        batch.committing = True
        self._commit(
            CommitToolResult(
                pending=pending,
                result=result,
                owed_after=self._owed("inference") if last else None,
            )
        )

    def _abandon_tools(self) -> None:
        if self._batch is None:
            return
        running = self._batch.abort_running(ABORTED_CALL)
        if running:
            self._out.append(CancelTools(internal_ids=running))

    # -- tool requests -----------------------------------------------------------------------

    def _take_requested(self, records: Sequence[ConversationRecord]) -> None:
        """A consumed message requested a tool call: it is dispatched before anything else of
        the pass, through the normal batch path. Its live call events follow the commit; no
        inference is invented for it."""
        calls = calls_recorded(records)
        if not calls:
            return
        self._resume = [self._pending(i, c) for i, c in enumerate(calls)]
        self._resume_fresh = True
        for call in calls:
            start = ToolCallStart(call_id=call.call_id, name=call.name, namespace=call.namespace)
            self._out.append(Emit(event=start))
            self._out.append(
                Emit(event=ToolCallEnd(call_id=call.call_id, arguments=call.arguments))
            )

    def _answer_undispatched(self) -> bool:
        """On abort: answer the calls recorded but not yet dispatched (a tool request, or
        calls stranded by a restart) so none is left open or runs in a later turn. True if
        an answer is being committed."""
        if self._resume is None or not self._resume_fresh:
            return False
        calls, self._resume = self._resume, None
        self._commit(self._answer(calls, ABORTED_CALL))
        return True

    # -- compaction --------------------------------------------------------------------------

    def _start_compaction(self) -> None:
        if self._children:
            return  # the provider session must be free of earlier streams first
        if not self.records:
            # Nothing to summarise: an empty conversation stays empty (no summary of 0
            # messages, no provider call); the waiter is answered as for a done compaction.
            self._compaction_done(error=None)
            self._decide()
            return
        self._compaction_id = self._new_id()
        self._compaction_through = len(self.records)
        self._children.add(self._compaction_id)
        self._waiting = "compaction"
        if self.owed is None or self.owed.stage != "compaction":
            self._commit(StageOwed(owed=self._owed("compaction")))
        self._out.append(
            StartCompaction(
                compaction_id=self._compaction_id,
                messages=provider_view(self.records),
                settings=self.settings,
            )
        )

    def _compaction_finished(self, event: CompactionFinished) -> None:
        self._children.discard(event.compaction_id)
        if event.compaction_id != self._compaction_id:
            self._decide()
            return
        self._waiting = None
        outcome = event.outcome
        if isinstance(outcome, CompactionCompleted):
            self._commit(
                ReplaceWithCompaction(
                    through_position=self._compaction_through,
                    messages=outcome.messages,
                    owes_answer=self._needs_inference,
                    owed=self._owed("inference"),
                )
            )
            return
        if isinstance(outcome, CompactionCancelled):
            self._compaction_done(error=None)
        else:
            self._compaction_done(error=outcome.message)
        self._decide()

    def _compaction_done(self, *, error: str | None) -> None:
        self._compaction_id = None
        self._compaction_requested = False
        if self._waiting == "compaction":
            self._waiting = None
        self._out.append(CompactionResolved(error=error))
