"""What spans the stages of a run: configuration, the durable mirror, run-wide requests,
the children and the commit pipeline — and the primitives every stage uses.

The stage itself (:mod:`agentkeep.loop.phases`) and the turn's findings (``Turn``) are
fields here; every rule that moves them lives in :mod:`agentkeep.loop.transitions` and the
step modules it calls.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agentkeep.loop.effects import Commit, Effect, LifecycleIds
from agentkeep.loop.phases import Idle, Phase, Turn
from agentkeep.loop.plans import AnswerCalls, Plan, QueueMode
from agentkeep.loop.server_calls import NO_SERVER_TOOLS, ServerToolPolicy
from agentkeep.loop.view import OpenCalls, ProviderViews
from agentkeep.types import (
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


def error_result(call: ToolCallBlock, text: str) -> ToolResultMessage:
    return ToolResultMessage(call_id=call.call_id, content=(TextBlock(text=text),), is_error=True)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounded exponential backoff for retrying forever (:mod:`agentkeep.loop.retry`):
    ``initial_seconds``, doubling after each failed attempt, at most ``max_seconds``."""

    initial_seconds: float = 0.1
    max_seconds: float = 30.0

    def delay(self, attempt: int) -> float:
        """The wait before retry number ``attempt`` (1-based)."""
        return min(self.max_seconds, self.initial_seconds * 2.0 ** min(attempt - 1, 64))


#: How long a finished block may wait for the provider's next event, to ride in the commit
#: that event brings, before it is committed on its own (``inference.hold``).
DEFAULT_HELD_BLOCK_SECONDS = 0.05


@dataclass(frozen=True, slots=True)
class LoopConfig:
    """What a loop is built with; never changes.

    Attributes:
        new_id: Makes every id the loop hands out (loops, turns, inferences, calls).
        defaults: The settings used until the durable state names others.
        modes: How many entries one pass consumes, per queue.
        max_failed_turns: Failed turns in a row after which the run stops, owed kept.
        eager_settle: No hook can add work after a response, so a response that ends the
            run may settle in its own final transaction.
        retry: Retry forever with this backoff (``agentkeep.loop.retry``); None: give up
            after ``max_failed_turns``.
        consume_at_acceptance: An idle loop may offer its next consumption to the
            acceptance that wakes it (``agentkeep.loop.offers``): nothing observes the
            hooks a run runs before it consumes.
        server_tools: What the system's server tools hide (``agentkeep.server_tools``).
        held_block_seconds: The bound on how long a finished block waits for the
            provider's next event before it is committed on its own (``inference.hold``);
            0: never held (each block is committed as it finishes).
    """

    new_id: Callable[[], str]
    defaults: Settings
    modes: dict[QueueName, QueueMode]
    max_failed_turns: int
    eager_settle: bool
    retry: RetryPolicy | None = None
    consume_at_acceptance: bool = False
    server_tools: ServerToolPolicy = NO_SERVER_TOOLS
    held_block_seconds: float = DEFAULT_HELD_BLOCK_SECONDS


class LoopContext:
    """The loop's state across stages (its one mutable object)."""

    def __init__(self, config: LoopConfig) -> None:
        self.config = config
        self.new_id = config.new_id  # the id factory, used by nearly every step
        self.out: list[Effect] = []  # the effects of the event being handled
        # durable mirror (valid once loaded; every change is applied when its commit lands).
        # ``records`` is only ever extended in place; any other change (a compaction, a
        # reset, a reload) assigns a new list: the incremental readings below rely on it.
        self.records: list[ConversationRecord] = []
        self.queued: dict[QueueName, list[QueuedMessage]] = {"steering": [], "send": []}
        self.notices: list[QueuedNotice] = []
        self.settings = config.defaults
        self.owed: OwedWork | None = None
        self.context_tokens: int | None = None
        # True while this instance has seen every change to the conversation land, so a turn
        # may re-read everything but the records (their count is still checked).
        self.mirror_valid = False
        # What the provider saw of ``records``, extended as they grow (rebuilt after a
        # compaction, a reset or a reload: a new list).
        self.views = ProviderViews()
        self.open_calls = OpenCalls()  # unanswered calls of ``records``, the same way
        # the stage and the turn
        self.phase: Phase = Idle()
        self.turn = Turn()
        # the run (valid while not Idle). Lifecycle ids (docs/lifecycle.md): the loop and
        # turn ids are settled at the turn's load (the owed fact's, after a restart) and
        # written with the owed fact before the first hook is told them; ``inference_id`` is
        # the latest provider request's; ``last_request_id`` the latest a request was sent
        # under in this process (never used again); ``settlement_id`` the run's settlement.
        self.loop_id: str | None = None
        self.turn_id: str | None = None
        self.inference_id: str | None = None
        self.last_request_id: str | None = None
        self.settlement_id: str | None = None
        self.loop_hook_due = False  # before_agent_loop is observed once the ids are settled
        self.run_failure: str | None = None
        self.turn_requested = False
        # requests and counts that outlive a turn
        self.compaction_requested = False
        self.shutdown = False
        self.resume_checked = False  # the trailing-question check ran (once per instance)
        # The (loop, turn, call, inference) ids an idle loop's consumption offer names
        # (loop.offers).
        self.offer_ids: tuple[str, str, str, str] | None = None
        self.failed_turns = 0
        self.retry_attempts = 0  # failed attempts in a row while retrying forever
        self.retry_stopped = False  # the system is closing: failures are no longer retried
        # The run's provider was removed (seed 001 provider disablement): this run's failures
        # are not retried; reset when a run starts.
        self.provider_disabled = False
        # children (streams, tools, compactions) not yet known to have stopped (§3.5)
        self.children: set[str] = set()
        # commits are strictly sequential: one in flight, the rest queued behind it
        self.commits: deque[Plan] = deque()
        self.commit_in_flight: Plan | None = None

    @property
    def running(self) -> bool:
        return not isinstance(self.phase, Idle)

    def has_input(self) -> bool:
        return bool(self.queued["steering"] or self.queued["send"] or self.notices)

    def commits_idle(self) -> bool:
        return self.commit_in_flight is None and not self.commits

    # -- commits -----------------------------------------------------------------------------

    def commit(self, plan: Plan) -> None:
        self.commits.append(plan)
        self.pump_commits()

    def pump_commits(self) -> None:
        if self.commit_in_flight is None and self.commits:
            self.commit_in_flight = self.commits.popleft()
            self.out.append(Commit(plan=self.commit_in_flight))

    def owed_now(
        self, stage: OwedStage, *, inference_id: str | None = None, response_open: bool = False
    ) -> OwedWork:
        return OwedWork(
            stage=stage,
            loop_id=self.loop_id,
            turn_id=self.turn_id,
            inference_id=inference_id,
            response_open=response_open,
        )

    def ids(self, *, inference: bool = False, settlement: bool = False) -> LifecycleIds:
        """The lifecycle ids a hook is told: the loop's and turn's, and (if asked) the
        latest request's and the settlement's."""
        return LifecycleIds(
            loop_id=self.loop_id,
            turn_id=self.turn_id,
            inference_id=self.inference_id if inference else None,
            settlement_id=self.settlement_id if settlement else None,
        )

    def usable_inference_id(self) -> str | None:
        """The inference id the durable owed fact holds for this turn's next request, if a
        request may be made under it: one no request of this process used, whose request
        (before a restart) committed no completed content (seed 001: an inference id
        survives only while its request has produced no completed block)."""
        owed = self.owed
        if owed is None or owed.stage != "inference" or owed.inference_id is None:
            return None
        if owed.response_open or owed.inference_id == self.last_request_id:
            return None
        if (owed.loop_id, owed.turn_id) != (self.loop_id, self.turn_id):
            return None
        return owed.inference_id

    def owed_for_inference(self) -> OwedWork:
        """The owed fact of an inference made due now: the next request's id (the one
        already owed if still usable, else a fresh one) is written with it, so the request
        and its hooks never wait for another commit to name it."""
        inference_id = self.usable_inference_id() or self.new_id()
        return self.owed_now("inference", inference_id=inference_id)

    def pending(self, index: int, call: ToolCallBlock) -> PendingToolCall:
        return PendingToolCall(internal_id=self.new_id(), index=index, call=call)

    def answer(self, calls: Sequence[ToolCallBlock | PendingToolCall], text: str) -> AnswerCalls:
        """Answer calls that will never run with the error ``text``. Each keeps the durable
        id it has (or gets one now): its result is a tool result like any other, and the
        transaction appending it runs ``after_tool_call_transact``."""
        pending = tuple(
            c if isinstance(c, PendingToolCall) else self.pending(i, c) for i, c in enumerate(calls)
        )
        return AnswerCalls(
            results=tuple(error_result(p.call, text) for p in pending), calls=pending
        )
