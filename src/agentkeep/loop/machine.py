"""The agent loop as a synchronous state machine: ``handle(event) -> effects``.

No I/O, no threads, no clock: ids come from an injected factory, every durable change is a
:class:`Commit` effect whose outcome comes back as ``CommitLanded``/``CommitFailed``, every
provider stream, tool call and compaction is a child the shell runs and reports on. The same
event sequence always yields the same effects, which is what lets hypothesis drive it.

Shape of a run (spec §3): a *run* goes from settled to settled; it is a sequence of *turns*;
each turn reloads durable state first (invariant 5), runs ``before_turn``, then *passes*:
resume a dispatched batch, compact if asked, consume steering (always) or send (only when
nothing is owed), consume notices, infer; a tool batch runs and the pass repeats. A turn ends
when a pass finds nothing to do; the run settles when no turn is requested.

Rules kept here, each cited where it is enforced:
- commits are strictly sequential, and no decision is taken while one is in flight;
- a stream's finished blocks are committed as they finish (``ResponseAssembler``);
- a tool batch is durable before any call starts; results land in batch order;
- a new provider request waits for every earlier child to stop (a stream still closing, an
  aborted tool still running); an abort never waits for them. (The shell reports an aborted
  tool that ignores its cancellation as stopped once its grace has passed: ``AgentChildren``.)
"""

from __future__ import annotations

from agentkeep.loop.effects import (
    CancelCompaction,
    CancelInference,
    CompactionResolved,
    Effect,
    Emit,
    LoadState,
    LoopStopped,
    Observe,
    RunHook,
)
from agentkeep.loop.events import (
    AbortRequested,
    ChildStopped,
    CommitFailed,
    CommitLanded,
    CompactionFinished,
    CompactRequested,
    Event,
    HookFinished,
    Loaded,
    LoadFailed,
    ShutdownRequested,
    Start,
    StreamEventArrived,
    ToolFinished,
    WorkAccepted,
)
from agentkeep.loop.inference_steps import InferenceSteps
from agentkeep.loop.plans import (
    AnswerCalls,
    AppendBlock,
    Appended,
    AppendFailureNote,
    CommitToolResult,
    Consumed,
    ConsumeNotices,
    ConsumeQueue,
    DispatchBatch,
    FinishResponse,
    Plan,
    ReplaceWithCompaction,
    Settle,
    Settled,
    Snapshot,
    StageOwed,
)
from agentkeep.loop.state import (
    ABORTED_CALL,
    ABORTED_COMPACTION,
    FAILED_TURN_CALL,
)
from agentkeep.loop.view import ends_in_failure_note, tail_owes_answer, undispatched_calls
from agentkeep.loop.work_steps import WorkSteps
from agentkeep.model import (
    DONE_CANCELLED,
    CompactionRecord,
    QueuedMessage,
    QueuedNotice,
    QueueName,
    UserRecord,
    done_error,
)


class AgentLoop(InferenceSteps, WorkSteps):
    """One agent's decisions. Feed it events; carry out the effects it returns, in order."""

    # -- public ------------------------------------------------------------------------------

    def handle(self, event: Event) -> list[Effect]:
        """Take one event; return the effects to carry out, in order."""
        self._out = []
        match event:
            case Start(explicit=explicit):
                if explicit:
                    # A caller named this agent: continue whatever the durable state owes,
                    # including a trailing question this instance already looked at.
                    self._resume_checked = False
                self._request_turn()
            case WorkAccepted(message=message, notice=notice):
                self._accept(message, notice)
                self._request_turn()
            case CompactRequested():
                self._compaction_requested = True
                self._request_turn()
            case AbortRequested():
                self._abort()
            case ShutdownRequested():
                self._shutdown = True
                self._decide()
            case Loaded(snapshot=snapshot):
                self._loaded(snapshot)
            case LoadFailed(message=message):
                self._waiting = None
                self._out.append(Emit(event=done_error(message)))
                self._run_failure = message
                self._failed_turns += 1
                self._finish_run()
            case CommitLanded(plan=plan, value=value):
                self._landed(plan, value)
            case CommitFailed(plan=plan, message=message, outcome_unknown=True):
                self._continue_from_store(message)
            case CommitFailed(plan=plan, message=message):
                self._commit_failed(plan, message)
            case StreamEventArrived(inference_id=inference_id, event=stream_event):
                self._stream_event(inference_id, stream_event)
            case ToolFinished(internal_id=internal_id, result=result):
                self._children.discard(internal_id)
                if self._batch is not None and self._batch.finish(internal_id, result):
                    self._pump_results()
                self._decide()
            case ChildStopped(child_id=child_id):
                self._children.discard(child_id)
                self._decide()
            case CompactionFinished():
                self._compaction_finished(event)
            case HookFinished():
                self._hook_finished(event)
        return self._out

    # -- runs and turns ----------------------------------------------------------------------

    def _request_turn(self) -> None:
        if self.running:
            self._turn_requested = True
            self._decide()
            return
        self.running = True
        self._turn_requested = True
        self._loop_id = self._new_id()
        self._run_failure = None
        self._out.append(Observe(hook="before_agent_loop"))
        self._begin_turn()

    def _begin_turn(self) -> None:
        self._reset_turn()
        self._turn_requested = False
        self._turn_id = self._new_id()
        self._waiting = "load"
        self._out.append(LoadState(records=not self._mirror_valid))

    def _loaded(self, snapshot: Snapshot) -> None:
        if snapshot.records is None and snapshot.record_count != len(self.records):
            # The durable conversation is not the one this instance remembers: read it all.
            self._mirror_valid = False
            self._out.append(LoadState(records=True))
            return
        self._waiting = None
        self._loaded_turn = True
        if snapshot.records is not None:
            self.records = list(snapshot.records)
            self._mirror_valid = True
        self.queued = {
            "steering": [m for m in snapshot.queued if m.queue == "steering"],
            "send": [m for m in snapshot.queued if m.queue == "send"],
        }
        self.notices = list(snapshot.notices)
        self.settings = snapshot.settings or self._defaults
        self.owed = snapshot.owed
        self.context_tokens = snapshot.context_tokens
        # Recovery (spec §3.13): a dispatched batch resumes; calls the history holds without a
        # batch entry never ran and are dispatched fresh; a trailing question is answered.
        if snapshot.pending:
            self._resume = list(snapshot.pending)
        else:
            stranded = undispatched_calls(self.records, ())
            if stranded:
                self._resume = [self._pending(i, c) for i, c in enumerate(stranded)]
                self._resume_fresh = True
        if not self._resume_checked:
            self._resume_checked = True
            self._needs_inference = tail_owes_answer(self.records)
        elif snapshot.owed is not None and ends_in_failure_note(self.records):
            # A failure note is owed an answer for as long as the owed fact stands — also
            # when this instance already looked once (a later run must not settle over it).
            self._needs_inference = True
        if self._aborted:
            self._decide()  # an abort during startup: the turn never reaches the model
            return
        self._waiting = "hook"
        self._out.append(RunHook(hook="before_turn", context_tokens=self.context_tokens))

    def _hook_finished(self, event: HookFinished) -> None:
        self._waiting = None
        if event.compact and not self._aborted:
            self._compaction_requested = True
        if event.hook == "before_turn":
            self._decide()
        elif event.hook == "after_turn":
            wants_more = self._turn_requested or self._compaction_requested
            if wants_more and self._may_continue():
                self._begin_turn()
            else:
                self._end_loop()
        else:  # after_agent_loop: actions reopen the loop instead of settling
            if (self._turn_requested or self._compaction_requested) and self._may_continue():
                self._begin_turn()
            else:
                self._finish_run()

    def _may_continue(self) -> bool:
        stuck = self._failed_turns >= self._max_failed_turns
        return not (self._aborted or self._blocked or self._shutdown or stuck)

    def _end_loop(self) -> None:
        self._waiting = "hook"
        self._out.append(RunHook(hook="after_agent_loop", drop_actions=not self._may_continue()))

    def _finish_run(self) -> None:
        """Settle if nothing is owed; otherwise stop with the owed fact kept."""
        owes_input = bool(self.queued["steering"] or self.queued["send"] or self.notices)
        if self._blocked or self._shutdown or self._failed_turns >= self._max_failed_turns:
            self._stop(settled=False)
        elif self._run_failure is not None:
            # An unrecovered failure left its note: the question was never answered, so the
            # owed fact stays and the next start (a restart included) answers it (issue 4).
            self._stop(settled=False)
        elif self._aborted and owes_input:
            # Decision (spec §3.9 observed edge): input left queued after an abort keeps the
            # owed fact, so a restarted system resumes it instead of stranding it.
            self._stop(settled=False)
        elif self._settled_early:
            self._stop(settled=True)  # the response's own transaction already settled
        else:
            self._waiting = "settle"
            self._commit(Settle())

    def _stop(self, *, settled: bool) -> None:
        self.running = False
        self._waiting = None
        error = self._run_failure
        if settled:
            self.owed = None
            self._failed_turns = 0
        if self._compaction_requested and not self._shutdown:
            self._compaction_requested = False
            self._out.append(CompactionResolved(error=ABORTED_COMPACTION))
        self._out.append(LoopStopped(settled=settled, error=error))
        if settled:
            self._out.append(Observe(hook="after_agent_settled", error=error))

    # -- the pass ----------------------------------------------------------------------------

    def _decide(self) -> None:
        """Take the next step of the turn, if nothing is in flight."""
        if not self._may_decide():
            return
        if self._aborted or self._shutdown or self._failing:
            if not (self._aborted and self._answer_undispatched()):
                self._end_turn()
        elif self._resume is not None:
            self._start_batch(self._resume, resumed=not self._resume_fresh)
        elif self._compaction_requested:
            self._start_compaction()
        elif not self._consume_next():
            if not self._needs_inference:
                self._end_turn()
            elif not self._children:  # earlier streams and aborted tools unwind first (§3.5)
                self._start_inference()

    def _may_decide(self) -> bool:
        if not self.running or self._waiting is not None or self._ending:
            return False
        if self._commit_in_flight is not None or self._commits:
            return False
        return self._batch is None or self._batch.done

    def _consume_next(self) -> bool:
        """One step of the pass's consumption; True if it committed something to wait for.

        Steering is consumed at every stop and outranks send; send only when nothing is
        owed; notices last, right before the inference that sees them (invariant 7).
        """
        if self._pass == "steering":
            self._pass = "send"
            if self.queued["steering"]:
                self._commit(self._consume("steering"))
                return True
        if self._pass == "send":
            self._pass = "notices"
            if not self._needs_inference and self.queued["send"]:
                self._commit(self._consume("send"))
                return True
        if self._pass == "notices":
            self._pass = "infer"
            if self.notices:
                self._commit(ConsumeNotices(owed=self._owed("inference")))
                return True
        return False

    def _consume(self, queue: QueueName) -> ConsumeQueue:
        return ConsumeQueue(
            queue=queue,
            mode=self._modes[queue],
            defaults=self._defaults,
            owed=self._owed("inference"),
            call_id=self._new_id(),  # for a tool request, if the batch holds one
        )

    def _end_turn(self) -> None:
        if self._ending:
            return
        if self._aborted and not self._cancel_emitted:
            has_input = self.queued["steering"] or self.queued["send"] or self.notices
            if self._needs_inference or has_input:
                self._cancel_emitted = True
                self._out.append(Emit(event=DONE_CANCELLED))
        note = self._pending_error
        may_note = self._loaded_turn and not self._blocked
        if note is not None and may_note and not undispatched_calls(self.records, ()):
            # Only an unrecovered failure leaves a trace, and never behind an open call.
            self._pending_error = None
            self._run_failure = note
            self._failed_turns += 1
            self._commit(AppendFailureNote(message=note))
            return
        if self._run_failure is None:
            self._failed_turns = 0
        self._ending = True
        self._waiting = "hook"
        self._out.append(
            RunHook(
                hook="after_turn",
                context_tokens=self.context_tokens,
                aborted=self._aborted,
                drop_actions=self._aborted,
            )
        )

    # -- acceptance mirror -------------------------------------------------------------------

    def _accept(self, message: QueuedMessage | None, notice: QueuedNotice | None) -> None:
        if message is not None:
            entries = self.queued[message.queue]
            if all(m.seq != message.seq for m in entries):
                entries.append(message)
                entries.sort(key=lambda m: m.seq)
        if notice is not None and all(n.seq != notice.seq for n in self.notices):
            self.notices.append(notice)
            self.notices.sort(key=lambda n: n.seq)

    def _landed(self, plan: Plan, value: Consumed | Appended | Settled | None) -> None:
        self._commit_in_flight = None
        match plan:
            case ConsumeQueue(queue=queue):
                assert isinstance(value, Consumed)
                self.records = (
                    list(value.records) if value.reset else [*self.records, *value.records]
                )
                if value.reset:
                    self.context_tokens = None
                self.settings = value.settings
                self.queued[queue] = list(value.remaining)
                if value.outranked:
                    for entry in value.outranked:
                        self._accept(entry, None)
                    self._pass = "steering"  # take the steering this pass did not know of
                if value.records:
                    self._needs_inference = True
                    self.owed = plan.owed
                for record in value.records:
                    if isinstance(record, UserRecord):  # durable: now it may be observed
                        self._out.append(
                            Observe(hook="message_accepted", accepted=record, queue=queue)
                        )
                self._take_requested(value.records)
                if not (self.queued["steering"] or self.queued["send"] or self.notices):
                    self._turn_requested = False  # consuming the last input answers the request
            case ConsumeNotices():
                assert isinstance(value, Appended)
                self.records.extend(value.records)
                self.notices = []
                if value.records:
                    self._needs_inference = True
                    self.owed = plan.owed
            case AppendBlock() | AnswerCalls() | AppendFailureNote():
                assert isinstance(value, Appended)
                self.records.extend(value.records)
            case FinishResponse(tokens=tokens):
                assert isinstance(value, Appended)
                self.records.extend(value.records)
                for entry in value.queued:  # what the mailbox has not told us yet
                    self._accept(entry, None)
                if tokens is not None:
                    self.context_tokens = tokens.total
                if value.settled:
                    self._settled_early = True
                    self.owed = None
            case StageOwed(owed=owed):
                self.owed = owed
            case DispatchBatch(calls=calls, owed=owed):
                self.owed = owed
                self._run_batch(calls, resumed=False)
            case CommitToolResult():
                assert isinstance(value, Appended)
                self.records.extend(value.records)
                if plan.owed_after is not None:
                    self.owed = plan.owed_after
                if self._batch is not None:
                    self._batch.committed_one()
                    if self._batch.done:
                        self._batch = None
                        self._needs_inference = True
                        self._pass = "steering"
                    else:
                        self._pump_results()
            case ReplaceWithCompaction(through_position=through, messages=messages):
                suffix = self.records[through:]
                owes = plan.owes_answer
                self.records = [CompactionRecord(messages=messages, owes_answer=owes), *suffix]
                self.context_tokens = None
                self.owed = plan.owed
                self._compaction_done(error=None)
            case Settle():
                assert isinstance(value, Settled)
                self._waiting = None
                if value.settled:
                    self._stop(settled=True)
                elif self._may_continue():
                    self._begin_turn()  # work arrived while settling: it is owed
                else:
                    self._stop(settled=False)
        self._pump_commits()
        if isinstance(plan, AppendFailureNote):
            self._end_turn()
        elif isinstance(plan, AppendBlock):
            self._maybe_finish_response()
        self._decide()

    def _commit_failed(self, plan: Plan, message: str) -> None:
        self._commit_in_flight = None
        # The outcome may be unknown (an error from COMMIT): trust nothing remembered.
        self._mirror_valid = False
        # Nothing after a failed commit may build on it: drop what was queued behind it.
        self._commits.clear()
        match plan:
            case Settle() | AnswerCalls():
                # The run cannot prove it owes nothing (or cannot close a call): keep owed.
                self._blocked = True
                self._waiting = None
                if isinstance(plan, Settle):
                    self._stop(settled=False)
                    return
                self._fail_turn(message)
            case CommitToolResult():
                # First failed result closes the batch; its entries and owed stay (spec §3.5).
                self._blocked = True
                if self._batch is not None:
                    self._abandon_tools()
                    self._batch = None
                self._fail_turn(message)
            case ReplaceWithCompaction():
                self._compaction_done(error=message)
                self._decide()
            case AppendFailureNote():
                self._end_turn_after_note()
            case _:
                self._fail_turn(message)

    def _continue_from_store(self, message: str) -> None:
        """A commit may or may not have landed: nothing remembered can be trusted. Drop the
        turn's memory (children are cancelled, nothing is written from memory) and go on from
        the durable state, exactly as a restarted process would — the path every crash
        campaign proves."""
        self._commit_in_flight = None
        self._commits.clear()
        self._held = []
        self._mirror_valid = False
        if self._response is not None and self._inference_id is not None:
            self._out.append(CancelInference(inference_id=self._inference_id))
            self._out.append(Emit(event=done_error(message)))
            self._response = None
        if self._batch is not None:
            self._abandon_tools()  # they run on unobserved; the reload decides their calls
            self._batch = None
        if self._compaction_id is not None:
            self._out.append(CancelCompaction(compaction_id=self._compaction_id))
            self._compaction_done(error=message)
        self._failed_turns += 1
        if self._failed_turns >= self._max_failed_turns:
            self._stop(settled=False)
            return
        self._resume_checked = False  # a trailing question found on reload is owed an answer
        self._begin_turn()

    def _end_turn_after_note(self) -> None:
        self._ending = False
        self._end_turn()

    def _fail_turn(self, message: str) -> None:
        """The turn cannot go on: stop children, close unanswered calls, note the failure."""
        self._held = []  # the store refused a write: nothing more of this response is kept
        if self._response is not None and self._inference_id is not None:
            self._out.append(CancelInference(inference_id=self._inference_id))
            self._out.append(Emit(event=done_error(message)))
            self._response = None
            self._waiting = None
        if self._compaction_id is not None:
            self._out.append(CancelCompaction(compaction_id=self._compaction_id))
            self._compaction_done(error=message)
        self._pending_error = message
        self._failing = True
        self._resume = None
        if not self._blocked:
            stranded = undispatched_calls(self.records, ())
            if stranded:
                self._commit(self._answer(stranded, FAILED_TURN_CALL))
                return
        self._end_turn()

    # -- abort -------------------------------------------------------------------------------

    def _abort(self) -> None:
        """Cancel the whole turn; never wait for a stream or a tool (invariant 17)."""
        if not self.running or self._aborted:
            return
        self._aborted = True
        self._turn_requested = False
        if self._response is not None and self._inference_id is not None:
            response = self._response
            self._flush_held()  # finished blocks stay in the history
            self._out.append(CancelInference(inference_id=self._inference_id))
            self._out.append(Emit(event=DONE_CANCELLED))
            self._cancel_emitted = True
            self._response = None
            self._waiting = None
            self._out.append(Observe(hook="after_inference", state="cancelled"))
            calls = response.client_calls
            if calls:
                self._commit(self._answer(calls, ABORTED_CALL))
        self._abandon_tools()
        self._pump_results()
        if self._compaction_id is not None:
            self._out.append(CancelCompaction(compaction_id=self._compaction_id))
            self._compaction_done(error=ABORTED_COMPACTION)
        elif self._compaction_requested:
            self._compaction_requested = False
            self._out.append(CompactionResolved(error=ABORTED_COMPACTION))
        self._decide()
