"""The agent loop as a synchronous state machine: ``handle(event) -> effects``.

No I/O, no threads, no clock: ids come from an injected factory, every durable change is a
:class:`~agentkeep.loop.effects.Commit` effect whose outcome comes back as
``CommitLanded``/``CommitFailed``, every provider stream, tool call and compaction is a child
the shell runs and reports on. The same event sequence always yields the same effects, which
is what lets hypothesis drive it.

Shape of a run: a *run* goes from settled to settled; it is a sequence of *turns*;
each turn reloads durable state first (invariant I6), runs ``before_turn``, then *passes*:
resume a dispatched batch, compact if asked, consume steering (always) or send (only when
nothing is owed), prepare the inference (``prepare_inference`` may compact first), open the
inference stage (consume notices), infer; a tool batch runs and the pass repeats. A turn ends
when a pass finds nothing to do; the run settles when no turn is requested.

A run an acceptance started by consuming under the idle loop's offer (:meth:`AgentLoop.offer`,
:mod:`~agentkeep.loop.offers`) begins in the pass, its message consumed: the acceptance's
transaction checked the store is the mirror its reload would have read.

Where things are: the stages of a run (:mod:`~agentkeep.loop.phases`), what spans them
(:mod:`~agentkeep.loop.context`), every transition (:mod:`~agentkeep.loop.transitions`) and
the steps it calls: :mod:`~agentkeep.loop.loading` (the turn's load),
:mod:`~agentkeep.loop.inference`, :mod:`~agentkeep.loop.tools`,
:mod:`~agentkeep.loop.compaction`, :mod:`~agentkeep.loop.landing` (commit outcomes) and
:mod:`~agentkeep.loop.interruptions` (failures and abort). The imports are a tree: this
module drives ``transitions``, ``transitions`` drives the steps, and a step reports what
happened (:class:`~agentkeep.loop.outcomes.Outcome`) instead of calling back into it.

Rules kept, each cited where it is enforced:
- commits are strictly sequential, and no decision is taken while one is in flight;
- a stream's finished blocks are committed as they finish (``ResponseAssembler``): each
  with the next event, or its own commit once ``held_block_seconds`` passed without one;
- a tool batch is durable before any call starts; results land in batch order;
- a new provider request waits for every earlier child to stop (a stream still closing, an
  aborted tool still running); an abort never waits for them. (The shell reports an aborted
  tool that ignores its cancellation as stopped once its grace has passed: ``AgentChildren``.)
"""

from __future__ import annotations

from collections.abc import Callable

from agentkeep.loop import offers, transitions
from agentkeep.loop.context import (
    DEFAULT_HELD_BLOCK_SECONDS,
    LoopConfig,
    LoopContext,
    RetryPolicy,
)
from agentkeep.loop.effects import Effect, LifecycleIds
from agentkeep.loop.events import Event
from agentkeep.loop.phases import Phase
from agentkeep.loop.plans import ConsumeOffer, QueueMode
from agentkeep.loop.provider_calls import NO_PROVIDER_TOOLS, ProviderToolPolicy
from agentkeep.types import Settings
from agentkeep.types.records import (
    ConversationRecord,
    OwedWork,
    QueuedMessage,
    QueuedNotice,
    QueueName,
)


class AgentLoop:
    """One agent's decisions. Feed it events; carry out the effects it returns, in order.

    Args:
        agent_id: The agent this loop decides for.
        new_id: Makes every id the loop hands out (loops, turns, inferences, calls).
        defaults: The settings used until the durable state names others.
        steering_mode: How many steering entries one pass consumes.
        send_mode: How many send entries one pass consumes.
        max_failed_turns: Failed turns in a row after which the run stops, owed kept.
        eager_settle: No hook can add work after a response, so a response that ends the
            run may settle in its own transaction.
        retry: Retry provider errors, failed compactions and fatal run-stage failures
            forever with this backoff (:mod:`~agentkeep.loop.retry`); None (the default):
            a failure leaves a note and the run gives up after ``max_failed_turns``.
        consume_at_acceptance: Nothing can observe the hooks a run runs before it consumes
            (no ``before_agent_loop`` or ``before_turn``), so an idle loop may offer its
            next consumption to the acceptance that wakes it (:meth:`offer`).
        provider_tools: What the system's server tools hide from the live events and the
            published history (:mod:`agentkeep.tools.provider_tools`).
        held_block_seconds: How long a finished block may wait for the provider's next
            event (to ride in the commit that event brings) before it is committed on its
            own: the bound on how long a finished block is volatile (``inference.hold``);
            0: each block is committed as it finishes.
        notify_inference: A feature supplies notices at the inference boundary, so every
            request opens with its own ``ConsumeNotices`` transaction (docs/notices.md).
        prepare_inference: A feature's ``prepare_inference`` is asked before each possible
            request (``loop.preparation``).
        transact_hooks: The transactional lifecycle hooks some feature overrides
            (``docs/hooks.md``); the loop carries only these in its plans.
    """

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
        retry: RetryPolicy | None = None,
        consume_at_acceptance: bool = False,
        provider_tools: ProviderToolPolicy = NO_PROVIDER_TOOLS,
        held_block_seconds: float = DEFAULT_HELD_BLOCK_SECONDS,
        notify_inference: bool = False,
        prepare_inference: bool = False,
        transact_hooks: frozenset[str] = frozenset(),
    ) -> None:
        self.agent_id = agent_id
        modes: dict[QueueName, QueueMode] = {"steering": steering_mode, "send": send_mode}
        config = LoopConfig(
            new_id,
            defaults,
            modes,
            max_failed_turns,
            eager_settle,
            retry,
            consume_at_acceptance,
            provider_tools,
            held_block_seconds,
            notify_inference,
            prepare_inference,
            transact_hooks,
        )
        self._ctx = LoopContext(config)

    def handle(self, event: Event) -> list[Effect]:
        """Take one event; return the effects to carry out, in order."""
        self._ctx.out = []
        transitions.handle(self._ctx, event)
        return self._ctx.out

    def offer(self) -> ConsumeOffer | None:
        """The consumption this idle loop offers the next acceptance (``loop.offers``), or
        None. Taken, it comes back as ``ConsumedAtAcceptance``; until then no other event
        may be fed (the shell withdraws the offer first)."""
        return offers.offer(self._ctx)

    @property
    def phase(self) -> Phase:
        """The stage the run is in (``Idle`` between runs)."""
        return self._ctx.phase

    @property
    def running(self) -> bool:
        """True from a run's start until it settles or stops."""
        return self._ctx.running

    @property
    def settings(self) -> Settings:
        """The settings in force (the durable ones once loaded)."""
        return self._ctx.mirror.settings

    @property
    def context_tokens(self) -> int | None:
        """The last measured context size, or None after a reset or compaction."""
        return self._ctx.mirror.context_tokens

    @property
    def records(self) -> list[ConversationRecord]:
        """The conversation as this loop last saw it land."""
        return self._ctx.mirror.records

    @property
    def queued(self) -> dict[QueueName, list[QueuedMessage]]:
        """The queued messages this loop knows of, by queue."""
        return self._ctx.mirror.queued

    @property
    def notices(self) -> list[QueuedNotice]:
        """The queued notices this loop knows of."""
        return self._ctx.mirror.notices

    @property
    def lifecycle_ids(self) -> LifecycleIds:
        """The loop and turn ids of the run under way (None outside one): what the hooks
        inside this moment's transaction are told."""
        return self._ctx.ids()

    @property
    def owed(self) -> OwedWork | None:
        """The owed fact as this loop last saw it land."""
        return self._ctx.mirror.owed
