"""The loop core's state and the primitives every part of it shares.

``AgentLoop`` (``machine.py``) is assembled from this base and two mixins: the response path
(``inference_steps.py``) and the batch and compaction path (``work_steps.py``). They share one
state; the split is by concern, so each file reads on its own.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from agentkeep.loop.batch import ToolBatch
from agentkeep.loop.effects import Commit, Effect
from agentkeep.loop.plans import AnswerCalls, Plan, QueueMode
from agentkeep.loop.response import ResponseAssembler
from agentkeep.model import (
    AssistantBlock,
    ConversationRecord,
    OwedStage,
    OwedWork,
    PendingToolCall,
    QueuedMessage,
    QueuedNotice,
    QueueName,
    Settings,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
)

ABORTED_CALL = "The tool call was aborted."
UNDISPATCHED_CALL = "The response ended before this tool call was dispatched."
FAILED_TURN_CALL = "The turn failed before this tool call finished."
ABORTED_COMPACTION = "The compaction was cancelled by an abort."
FAILURE_NOTE = "The last turn failed: {}"


def error_result(call: ToolCallBlock, text: str) -> ToolResultMessage:
    return ToolResultMessage(call_id=call.call_id, content=(TextBlock(text=text),), is_error=True)


class LoopState:
    """Fields and shared primitives of the loop core (no decisions live here)."""

    def __init__(
        self,
        agent_id: str,
        *,
        new_id: Callable[[], str],
        defaults: Settings,
        steering_mode: QueueMode = "one-at-a-time",
        send_mode: QueueMode = "one-at-a-time",
        max_failed_turns: int = 3,
        eager_settle: bool = False,
    ) -> None:
        self.agent_id = agent_id
        self._new_id = new_id
        self._defaults = defaults
        self._modes: dict[QueueName, QueueMode] = {"steering": steering_mode, "send": send_mode}
        self._max_failed_turns = max_failed_turns
        # True when no hook can add work after a response (no action hooks): a response that
        # ends the run may then settle in its own final transaction.
        self._eager_settle = eager_settle
        self._held: list[AssistantBlock] = []  # finished blocks waiting for the next event
        self._out: list[Effect] = []
        # durable mirror (valid once loaded; every change is applied when its commit lands)
        self.records: list[ConversationRecord] = []
        self.queued: dict[QueueName, list[QueuedMessage]] = {"steering": [], "send": []}
        self.notices: list[QueuedNotice] = []
        self.settings = defaults
        self.owed: OwedWork | None = None
        self.context_tokens: int | None = None
        # run state
        self.running = False
        self._run_failure: str | None = None
        self._turn_requested = False
        self._compaction_requested = False
        self._shutdown = False
        self._resume_checked = False
        self._loop_id: str | None = None
        self._turn_id: str | None = None
        self._waiting: str | None = None  # "load" | "hook" | "stream" | "compaction" | "settle"
        self._pending_error: str | None = None
        self._batch: ToolBatch | None = None
        self._resume: list[PendingToolCall] | None = None
        self._response: ResponseAssembler | None = None
        self._inference_id: str | None = None
        self._compaction_id: str | None = None
        self._reset_turn()
        self._commits: deque[Plan] = deque()
        self._commit_in_flight: Plan | None = None
        self._children: set[str] = set()
        # True while this instance has seen every change to the conversation land, so a turn
        # may re-read everything but the records (their count is still checked).
        self._mirror_valid = False
        self._failed_turns = 0

    def _reset_turn(self) -> None:
        self._waiting = None
        self._loaded_turn = False
        self._aborted = False
        self._cancel_emitted = False
        self._pending_error = None
        self._needs_inference = False
        self._pass = "steering"
        self._batch = None
        self._resume = None
        self._resume_fresh = False
        self._response = None
        self._inference_id = None
        self._compaction_id = None
        self._compaction_through = 0
        self._blocked = False
        self._failing = False
        self._ending = False
        self._settled_early = False

    # -- commits -----------------------------------------------------------------------------

    def _commit(self, plan: Plan) -> None:
        self._commits.append(plan)
        self._pump_commits()

    def _pump_commits(self) -> None:
        if self._commit_in_flight is None and self._commits:
            self._commit_in_flight = self._commits.popleft()
            self._out.append(Commit(plan=self._commit_in_flight))

    def _owed(self, stage: OwedStage) -> OwedWork:
        return OwedWork(stage=stage, loop_id=self._loop_id, turn_id=self._turn_id)

    def _pending(self, index: int, call: ToolCallBlock) -> PendingToolCall:
        return PendingToolCall(internal_id=self._new_id(), index=index, call=call)

    def _answer(self, calls: Sequence[ToolCallBlock | PendingToolCall], text: str) -> AnswerCalls:
        """Answer calls that will never run with the error ``text``. Each keeps the durable
        id it has (or gets one now): its result is a tool result like any other, and the
        transaction appending it runs ``after_tool_call_transact``."""
        pending = tuple(
            c if isinstance(c, PendingToolCall) else self._pending(i, c)
            for i, c in enumerate(calls)
        )
        return AnswerCalls(
            results=tuple(error_result(p.call, text) for p in pending), calls=pending
        )

    if TYPE_CHECKING:  # implemented by AgentLoop; declared here for the mixins

        def _decide(self) -> None: ...

        def _end_turn(self) -> None: ...

        def _fail_turn(self, message: str) -> None: ...

        def _abandon_tools(self) -> None: ...

        def _pump_results(self) -> None: ...

        def _compaction_done(self, *, error: str | None) -> None: ...
