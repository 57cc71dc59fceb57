"""The response path of the loop core: start an inference, read its stream, judge its end."""

from __future__ import annotations

from agentkeep.loop.effects import Emit, Observe, StartInference
from agentkeep.loop.plans import AppendBlock, DispatchBatch, FinishResponse
from agentkeep.loop.response import ResponseAssembler
from agentkeep.loop.state import ABORTED_CALL, UNDISPATCHED_CALL, LoopState
from agentkeep.loop.view import provider_view
from agentkeep.model import Done, StreamEvent, ToolCallBlock


class InferenceSteps(LoopState):
    def _start_inference(self) -> None:
        self._inference_id = self._new_id()
        self._response = ResponseAssembler()
        self._children.add(self._inference_id)
        self._waiting = "stream"
        self._pass = "steering"
        self._out.append(Observe(hook="before_inference"))
        self._out.append(
            StartInference(
                inference_id=self._inference_id,
                messages=provider_view(self.records),
                settings=self.settings,
            )
        )

    def _stream_event(self, inference_id: str, event: StreamEvent) -> None:
        response = self._response
        if response is None or inference_id != self._inference_id:
            return  # a cancelled response's leftovers: its terminal event was already given
        self._out.append(Emit(event=event))
        if not isinstance(event, Done):
            self._flush_held()
        self._held.extend(response.feed(event))
        self._maybe_finish_response()

    def _flush_held(self) -> None:
        """Commit the blocks the previous event finished (the response goes on)."""
        held, self._held = self._held, []
        for block in held:
            self._commit(AppendBlock(block=block))

    def _maybe_finish_response(self) -> None:
        response = self._response
        if response is None or response.done is None:
            return
        if self._commit_in_flight is not None or self._commits:
            return  # every finished block lands before the response is judged
        done = response.done
        self._response = None
        self._waiting = None
        self._out.append(
            Observe(
                hook="after_inference", state=done.state, tokens=done.tokens, error=done.message
            )
        )
        measured = done.state in ("normal", "tool_call", "length")
        blocks, self._held = tuple(self._held), []
        calls = response.client_calls
        settle = self._eager_settle and self._ends_run(done, calls)
        if blocks or settle or (measured and done.tokens is not None):
            tokens = done.tokens if measured else None
            self._commit(FinishResponse(blocks=blocks, tokens=tokens, settle=settle))
        self._judge_response(done, calls)

    def _ends_run(self, done: Done, calls: list[ToolCallBlock]) -> bool:
        """Whether nothing can follow this response in this run (so it may settle now)."""
        if done.state not in ("normal", "length") or calls or self._pending_error is not None:
            return False
        has_input = self.queued["steering"] or self.queued["send"] or self.notices
        busy = (
            self._turn_requested
            or self._compaction_requested
            or self._children - {self._inference_id or ""}
        )
        return not (has_input or busy or self._aborted or self._shutdown or self._blocked)

    def _judge_response(self, done: Done, calls: list[ToolCallBlock]) -> None:
        if done.state == "error":
            self._pending_error = done.message or "The provider reported an error."
        elif done.state != "cancelled":
            self._pending_error = None  # a later success recovers silently
        self._needs_inference = False
        if done.state == "tool_call" and calls and not self._shutdown:
            pending = tuple(self._pending(i, c) for i, c in enumerate(calls))
            self._commit(DispatchBatch(calls=pending, owed=self._owed("tools")))
            return
        if calls and not self._shutdown:
            text = ABORTED_CALL if done.state == "cancelled" else UNDISPATCHED_CALL
            self._commit(self._answer(calls, text))
        if done.state == "cancelled" and not self._aborted:
            self._aborted = True  # the provider stopped it: the turn stops, queues stay
