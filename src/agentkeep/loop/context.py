"""What spans the stages of a run — configuration and :class:`LoopContext`, whose state is
grouped in parts, each a small class keeping one invariant: the durable :class:`Mirror`, the
run's :class:`Lifecycle` ids, the :class:`Run` under way, the outside :class:`Requests`, the
:class:`Failures` in a row and the :class:`Commits` pipeline — and the primitives every stage
uses.

The stage itself (:mod:`agentkeep.loop.phases`) and the turn's findings (``Turn``) are
fields here; every rule that moves them lives in :mod:`agentkeep.loop.transitions` and the
step modules it calls.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from agentkeep.loop.effects import Commit, Effect, LifecycleIds
from agentkeep.loop.phases import Idle, Phase, Turn
from agentkeep.loop.plans import AnswerCalls, Plan, QueueMode
from agentkeep.loop.provider_calls import NO_PROVIDER_TOOLS, ProviderToolPolicy
from agentkeep.loop.view import OpenCalls, ProviderViews
from agentkeep.types import Settings, TextBlock, ToolCallBlock, ToolResultMessage
from agentkeep.types.records import (
    ConversationRecord,
    OwedStage,
    OwedWork,
    PendingToolCall,
    QueuedMessage,
    QueuedNotice,
    QueueName,
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
        provider_tools: What the system's provider tools hide (``agentkeep.tools.provider_tools``).
        held_block_seconds: The bound on how long a finished block waits for the
            provider's next event before it is committed on its own (``inference.hold``);
            0: never held (each block is committed as it finishes).
        notify_inference: A feature supplies notices at the inference boundary
            (``system_notifications_transact``): every request opens with its own
            ``ConsumeNotices`` transaction, in which that hook runs.
        prepare_inference: A feature's ``prepare_inference`` may ask for a compaction
            before each possible request (``loop.preparation``).
        transact_hooks: The transactional lifecycle hooks some feature overrides
            (``docs/hooks.md``): only these are carried by a plan, so one nobody overrides
            costs no commit and no work in one.
    """

    new_id: Callable[[], str]
    defaults: Settings
    modes: dict[QueueName, QueueMode]
    max_failed_turns: int
    eager_settle: bool
    retry: RetryPolicy | None = None
    consume_at_acceptance: bool = False
    provider_tools: ProviderToolPolicy = NO_PROVIDER_TOOLS
    held_block_seconds: float = DEFAULT_HELD_BLOCK_SECONDS
    notify_inference: bool = False
    prepare_inference: bool = False
    transact_hooks: frozenset[str] = frozenset()


@dataclass(slots=True)
class Mirror:
    """The durable conversation as this instance last saw it land.

    Invariant: every change is applied when its commit lands, never before
    (:mod:`agentkeep.loop.landing`), so the mirror is always a state the store has held.
    ``records`` is only ever extended in place; any other change (a compaction, a reset, a
    reload) assigns a new list — ``views`` and ``open_calls``, which read the records
    incrementally, rely on it.
    """

    settings: Settings
    records: list[ConversationRecord] = field(default_factory=list)
    queued: dict[QueueName, list[QueuedMessage]] = field(
        default_factory=lambda: {"steering": [], "send": []}
    )
    notices: list[QueuedNotice] = field(default_factory=list)
    owed: OwedWork | None = None
    context_tokens: int | None = None
    # True while this instance has seen every change to the conversation land, so a turn
    # may re-read everything but the records (their count is still checked).
    valid: bool = False
    # The trailing-question check ran (once per instance; again once the mirror is doubted).
    resume_checked: bool = False
    # What the provider saw of ``records``, and their unanswered calls, extended as they grow.
    views: ProviderViews = field(default_factory=ProviderViews)
    open_calls: OpenCalls = field(default_factory=OpenCalls)

    def has_input(self) -> bool:
        """Anything queued or noticed that a pass would consume."""
        return bool(self.queued["steering"] or self.queued["send"] or self.notices)


@dataclass(slots=True)
class Lifecycle:
    """The run's lifecycle ids (``docs/lifecycle.md``), None outside a run.

    Invariant: ``loop_id`` and ``turn_id`` are settled at the turn's load (the owed fact's,
    after a restart) and written with the owed fact before any hook is told them.
    ``inference_id`` is the latest provider request's; ``last_request_id`` the latest a request
    was sent under in this process (never used again); ``settlement_id`` the run's settlement
    (allocated when the run first settles or adopted from the owed fact, and kept in every
    owed fact written after that, so a restart settles under the same id).
    ``offer_ids``: the (loop, turn, call, inference) ids an idle loop's consumption offer names
    (:mod:`agentkeep.loop.offers`), reserved until a run uses them.
    """

    loop_id: str | None = None
    turn_id: str | None = None
    inference_id: str | None = None
    last_request_id: str | None = None
    settlement_id: str | None = None
    offer_ids: tuple[str, str, str, str] | None = None


@dataclass(slots=True)
class Run:
    """What the run under way carries. Invariant: a fresh one when a run starts
    (``transitions.request_turn``, or a run an acceptance opened: ``loop.offers``)."""

    hook_due: bool = False  # before_agent_loop is observed once the ids are settled
    # before_agent_loop_transact is due: it runs in the next turn's opening commit (a run's
    # first turn, or the turn that reopens the loop after after_agent_loop's actions).
    loop_opening: bool = False
    failure: str | None = None  # the unrecovered failure that left its note
    # The run's provider was removed (provider disablement): its failures are not
    # retried.
    provider_disabled: bool = False


@dataclass(slots=True)
class Requests:
    """What was asked of the loop from outside; each stands until it is answered, across
    turns (a turn, a compaction) or for good (a shutdown, the end of retrying)."""

    turn: bool = False  # a turn is wanted (input arrived, a start, a hook's action)
    compaction: bool = False  # ``compact()`` awaits its ``CompactionResolved``
    shutdown: bool = False  # graceful: finish what is in flight, start nothing new
    retry_stopped: bool = False  # the system is closing: failures are no longer retried


@dataclass(slots=True)
class Failures:
    """Failures in a row, against the loop's bounds. Invariant: ``turns`` is reset by a turn
    that ends without a failure and by a settlement (the run stops, owed kept, at
    ``max_failed_turns``); ``retry_attempts`` by an attempt that gets through (the backoff
    grows with it while retrying forever)."""

    turns: int = 0
    retry_attempts: int = 0
    # The measurement (context tokens) prepare_inference may not compact at: the one a failed
    # attempt saw, or None right after a replacement (``loop.preparation``).
    compaction_at: tuple[int | None] | None = None


@dataclass(slots=True)
class Commits:
    """The commit pipeline. Invariant: commits are strictly sequential — at most one in
    flight, the rest queued behind it in order; nothing is decided while one is in flight."""

    queued: deque[Plan] = field(default_factory=deque)
    in_flight: Plan | None = None

    def idle(self) -> bool:
        return self.in_flight is None and not self.queued

    def clear(self) -> None:
        """Drop the queued commits (nothing may build on a failed one)."""
        self.queued.clear()


class LoopContext:
    """The loop's state across stages (its one mutable object), in parts: the stage
    (``phase``) and the turn's findings (``turn``); the durable ``mirror``; the run's
    ``lifecycle`` ids; the ``run`` under way; the outside ``requests``; the ``failures`` in a
    row; the ``commits`` pipeline; the ``children`` still running; and ``out``, the effects of
    the event being handled."""

    __slots__ = (
        "children",
        "commits",
        "config",
        "failures",
        "lifecycle",
        "mirror",
        "out",
        "phase",
        "requests",
        "run",
        "turn",
    )

    def __init__(self, config: LoopConfig) -> None:
        self.config = config
        self.out: list[Effect] = []
        self.phase: Phase = Idle()
        self.turn = Turn()
        self.mirror = Mirror(settings=config.defaults)
        self.lifecycle = Lifecycle()
        self.run = Run()
        self.requests = Requests()
        self.failures = Failures()
        self.commits = Commits()
        # children (streams, tools, compactions) not yet known to have stopped
        self.children: set[str] = set()

    def new_id(self) -> str:
        """A fresh id from the loop's factory (loops, turns, inferences, calls, timers)."""
        return self.config.new_id()

    @property
    def running(self) -> bool:
        return not isinstance(self.phase, Idle)

    # -- commits -----------------------------------------------------------------------------

    def commit(self, plan: Plan) -> None:
        """Queue ``plan`` behind the commit in flight (or send it out now)."""
        self.commits.queued.append(plan)
        self.pump_commits()

    def pump_commits(self) -> None:
        """With none in flight, send the next queued commit out (a ``Commit`` effect)."""
        commits = self.commits
        if commits.in_flight is None and commits.queued:
            commits.in_flight = commits.queued.popleft()
            self.out.append(Commit(plan=commits.in_flight))

    def hooked(self, hook: str) -> bool:
        """Whether some feature overrides the transactional lifecycle hook ``hook``."""
        return hook in self.config.transact_hooks

    def opens_every_stage(self) -> bool:
        """Whether every request opens with its own inference stage transaction
        (``ConsumeNotices``): a feature supplies notices at the inference boundary or
        overrides ``before_inference_transact``, which run in it (docs/notices.md)."""
        return self.config.notify_inference or self.hooked("before_inference_transact")

    def owed_now(
        self, stage: OwedStage, *, inference_id: str | None = None, response_open: bool = False
    ) -> OwedWork:
        return OwedWork(
            stage=stage,
            loop_id=self.lifecycle.loop_id,
            turn_id=self.lifecycle.turn_id,
            inference_id=inference_id,
            settlement_id=self.lifecycle.settlement_id,
            response_open=response_open,
        )

    def ids(self, *, inference: bool = False, settlement: bool = False) -> LifecycleIds:
        """The lifecycle ids a hook is told: the loop's and turn's, and (if asked) the
        latest request's and the settlement's."""
        ids = self.lifecycle
        return LifecycleIds(
            loop_id=ids.loop_id,
            turn_id=ids.turn_id,
            inference_id=ids.inference_id if inference else None,
            settlement_id=ids.settlement_id if settlement else None,
        )

    def usable_inference_id(self) -> str | None:
        """The inference id the durable owed fact holds for this turn's next request, if a
        request may be made under it: one no request of this process used, whose request
        (before a restart) committed no completed content (an inference id
        survives only while its request has produced no completed block)."""
        owed, ids = self.mirror.owed, self.lifecycle
        if owed is None or owed.stage != "inference" or owed.inference_id is None:
            return None
        if owed.response_open or owed.inference_id == ids.last_request_id:
            return None
        if (owed.loop_id, owed.turn_id) != (ids.loop_id, ids.turn_id):
            return None
        opened = owed.stage_opened_at
        if opened is not None and opened != len(self.mirror.records):
            # Its stage opened and the conversation changed since (a failure note, say):
            # the request is made under a new id, behind a boundary of its own.
            return None
        return owed.inference_id

    def owed_for_inference(self) -> OwedWork:
        """The owed fact of an inference made due now: the next request's id (the one
        already owed if still usable, else a fresh one) is written with it, so the request
        and its hooks never wait for another commit to name it."""
        owed = self.mirror.owed
        reuse = self.usable_inference_id()
        if owed is not None and owed.stage_opened_at is not None:
            # Its stage opened: a transaction appending before the request makes the
            # request another one, behind a boundary of its own (docs/notices.md).
            reuse = None
        return self.owed_now("inference", inference_id=reuse or self.new_id())

    def stage_open(self) -> bool:
        """The coming request's inference stage opened (its boundary notices are in, and
        nothing was appended since): the owed fact marks it (``stage_opened_at``) under the
        id the request will be made under — in this process, or before a restart
        (docs/notices.md)."""
        owed = self.mirror.owed
        return (
            owed is not None
            and owed.stage_opened_at == len(self.mirror.records)
            and owed.inference_id is not None
            and owed.inference_id == self.usable_inference_id()
        )

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
