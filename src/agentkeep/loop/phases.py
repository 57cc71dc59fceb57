"""The stages of a run, as a tagged union: each stage carries only what it needs.

A loop is in exactly one :data:`Phase` at a time; :mod:`agentkeep.loop.transitions` moves it
from one to the next. What spans stages lives in :class:`~agentkeep.loop.context.LoopContext`;
what one turn learns (aborted, failing, what is owed next) lives in :class:`Turn`.

Stage         waits for                            rule (docs/architecture.md, "Inside the loop")
``Idle``      a start, a message, a compaction     run (none under way)
``Loading``   ``Loaded`` / ``LoadFailed``          turn: reload durable state
``InHook``    ``HookFinished`` of that hook        hooks: before_turn, after_turn, after_agent_loop,
                                                   prepare_inference (loop.preparation)
``Passing``   commits landing, a tool batch, or    pass: consume queues and notices,
              nothing (the next step is decided)   land results
``Inferring`` stream events of one inference       infer
``Compacting`` the compaction's outcome, then      compact
              its replacement commit
``Settling``  the ``Settle`` commit                settle
``BackingOff`` ``TimerFired`` before a retry         ``retry_forever`` (docs/decisions.md)

(``Inferring`` takes a ``TimerFired`` too: the bound on how long a finished block is held.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from agentkeep.loop.batch import ToolBatch
from agentkeep.loop.effects import HookName
from agentkeep.loop.provider_calls import ProviderCalls
from agentkeep.loop.response import ResponseAssembler
from agentkeep.types import AssistantBlock
from agentkeep.types.records import PendingToolCall


@dataclass(frozen=True, slots=True)
class Idle:
    """No run: the loop waits for a start, a message or a compaction request."""


@dataclass(frozen=True, slots=True)
class Loading:
    """A turn began: the durable state is being read (invariant I6)."""


@dataclass(frozen=True, slots=True)
class InHook:
    """An action hook runs; the shell answers with ``HookFinished(hook)``."""

    hook: HookName


@dataclass(frozen=True, slots=True)
class Passing:
    """The turn's pass: nothing is streamed, compacted or awaited from a hook. Consumption,
    tool-result and other commits land here, and the next step is decided once none is in
    flight and the turn's batch (if any) is done."""


@dataclass(slots=True)
class Inferring:
    """One provider response streams in. ``held``: the blocks the latest event finished,
    committed when the next event shows the response goes on (or with its end) — or, if no
    event comes first, when ``hold_timer`` fires (:func:`agentkeep.loop.inference.hold`).
    ``continued``: the published blocks of the cut responses it continues (read from the
    records when the request is made: ``view.continued_blocks``), the start of the assistant
    message it completes."""

    inference_id: str
    continued: tuple[AssistantBlock, ...] = ()
    response: ResponseAssembler = field(default_factory=ResponseAssembler)
    held: list[AssistantBlock] = field(default_factory=list)
    hold_timer: str | None = None  # the timer bounding how long ``held`` waits (if any)
    provider_calls: ProviderCalls = field(default_factory=ProviderCalls)  # what they hide
    opened: bool = False  # a finished block was committed (the owed fact marks it open)


@dataclass(frozen=True, slots=True)
class Compacting:
    """A compaction of the first ``through`` records runs; once ``summarised``, its
    replacement commit is in flight."""

    compaction_id: str
    through: int
    summarised: bool = False


@dataclass(frozen=True, slots=True)
class Settling:
    """The run owes nothing: the ``Settle`` commit is in flight."""


@dataclass(frozen=True, slots=True)
class BackingOff:
    """Retrying forever: a failed attempt waits for ``TimerFired(timer_id)``; then the pass
    (``then="pass"``) or the turn's load (``then="load"``) goes on (:mod:`agentkeep.loop.retry`)."""

    timer_id: str
    then: Literal["pass", "load"]


Phase: TypeAlias = (
    Idle | Loading | InHook | Passing | Inferring | Compacting | Settling | BackingOff
)


@dataclass(frozen=True, slots=True)
class Dispatched:
    """A batch dispatched before a restart: its calls resume."""

    calls: list[PendingToolCall]


@dataclass(frozen=True, slots=True)
class Recorded:
    """Calls the history holds that no batch dispatched (stranded by a restart, or asked for
    by a consumed tool request): they are dispatched fresh, or answered if the turn aborts."""

    calls: list[PendingToolCall]


ConsumeStep: TypeAlias = Literal["steering", "send", "notices", "infer"]


@dataclass(slots=True)
class Turn:
    """What one turn has learned; a new turn starts from a fresh one.

    The tool batch lives here rather than in a stage: a dispatched batch's results keep
    landing in batch order whatever else the turn does.
    """

    loaded: bool = False  # the durable state was read (a failure note needs it)
    aborted: bool = False  # an abort, or the provider cancelled the response
    cancel_emitted: bool = False  # the one terminal ``done{cancelled}`` was given
    pending_error: str | None = None  # an unrecovered provider error
    failing: bool = False  # the turn cannot go on: it ends at the next decision
    blocked: bool = False  # a failed write left the owed fact standing: no settlement
    ending: bool = False  # after_turn was asked: nothing more is decided in this turn
    opening: bool = False  # the load staged the turn's ids: its hooks wait for that commit
    settled_early: bool = False  # the last response's own transaction settled the run
    needs_inference: bool = False  # something awaits a provider response
    step: ConsumeStep = "steering"  # where the pass's consumption stands (invariant I5)
    resume: Dispatched | Recorded | None = None  # calls to run before anything else
    batch: ToolBatch | None = None
    # The request whose response the next dispatch comes from (None: calls a load found).
    asked_by: str | None = None
    # The coming request: prepare_inference ran for it (``loop.preparation``); the
    # compaction under way is the one it asked for.
    prepared: bool = False
    auto_compaction: bool = False
    # after_turn_transact / after_agent_loop_transact is committing: its action hook waits.
    closing: bool = False
