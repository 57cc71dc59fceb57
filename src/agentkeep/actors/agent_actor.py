"""The agent actor: the thin shell that feeds the pure loop events and carries out its effects.

It blocks its mailbox only on store commits (milliseconds); streams, tool calls and
compactions run in child actors, which it supervises (``AgentChildren``), and report back by
message. Effects are carried out in the order the core returned them; the outcome of a
synchronous effect (a load, a commit, an action hook) is fed back before the next mailbox
message is taken, so the core sees a commit land before it sees anything that happened after
it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, cast, get_args

import pykka

from agentkeep.actors.agent_children import AgentChildren, GraceExpired
from agentkeep.actors.agent_hooks import AgentHooks
from agentkeep.actors.children import (
    ChildReport,
    CompactionActor,
    ToolCallActor,
    run_child,
)
from agentkeep.actors.claiming import ClaimSlot
from agentkeep.actors.consume_claim import ClaimTold
from agentkeep.actors.hook_contexts import HookContexts
from agentkeep.actors.inference_worker import InferenceWorker, StreamJob, StreamReports
from agentkeep.actors.loop_timers import LoopTimers
from agentkeep.actors.model_session import ModelSessionSlot
from agentkeep.actors.plan_hooks import ConsumptionPolicy, LifecycleHooks, ToolCallHooks
from agentkeep.actors.status import AgentStatus
from agentkeep.actors.supervision.inbox import SimpleInboxMixin
from agentkeep.actors.supervision.supervised import ChildExited
from agentkeep.actors.supervisor import SupervisedMixin
from agentkeep.actors.tool_runner import BatchTools, ToolRunner
from agentkeep.actors.turn_spans import TurnSpans
from agentkeep.errors import CommitOutcomeUnknownError, UnknownProviderError
from agentkeep.features import (
    FeatureSet,
)
from agentkeep.logs import get_logger
from agentkeep.loop.context import DEFAULT_HELD_BLOCK_SECONDS, RetryPolicy
from agentkeep.loop.effects import (
    CancelCompaction,
    CancelInference,
    CancelTimer,
    CancelTools,
    Commit,
    CompactionResolved,
    Effect,
    Emit,
    LifecycleIds,
    LoadState,
    LoopStopped,
    Observe,
    RunHook,
    StartCompaction,
    StartInference,
    StartTimer,
    StartTools,
    ToolRun,
)
from agentkeep.loop.events import (
    EVENT_TYPES,
    AbortRequested,
    ChildStopped,
    CommitFailed,
    CommitLanded,
    CompactRequested,
    Event,
    Loaded,
    LoadFailed,
    ProviderRemoved,
    Start,
    StreamEventArrived,
    TimerFired,
    WorkAccepted,
)
from agentkeep.loop.machine import AgentLoop
from agentkeep.loop.plans import Plan, QueueMode, Snapshot, TransactHookName
from agentkeep.metrics import RuntimeMetrics
from agentkeep.modules import AgentSnapshot
from agentkeep.modules._runtime import ModuleRuntime
from agentkeep.persistence.interface import StoreHandle, Transaction
from agentkeep.providers.catalog import Providers
from agentkeep.providers.credentials import CredentialResolver
from agentkeep.providers.protocol import CancelToken
from agentkeep.runtime import commit_plans
from agentkeep.runtime.base_state import BaseStateSource, selection_of
from agentkeep.tools.provider_tools import ProviderTool, check_provider_tools, policy_of
from agentkeep.tracing import current
from agentkeep.types import (
    Context,
    JSONObject,
    Selection,
    Settings,
    TextDelta,
    ToolResultMessage,
    done_error,
    new_id,
)
from agentkeep.types.ledger import TEXT_DELTA

log = get_logger(__name__)

# Events that callers outside the actor hand in; each was counted by ``status.signal_sent``.
_SIGNALS = (Start, WorkAccepted, CompactRequested)

# The transactional lifecycle hooks a plan may carry (``loop.plans.TransactHookName``).
TRANSACT_HOOKS = get_args(TransactHookName)
# Hooks a run runs before it consumes: with any overridden, an acceptance may not consume
# for it (``loop.offers``), so they run before the consumption as the loop orders them.
_OPENING = (
    "before_agent_loop",
    "before_turn",
    "before_agent_loop_transact",
    "before_turn_transact",
)
# Transactional hooks that close a turn, a loop or the settlement: they need the settlement
# in a transaction of its own, after them.
_CLOSING = ("after_turn_transact", "after_agent_loop_transact", "after_agent_settled_transact")


@dataclass(frozen=True, kw_only=True)
class LoopOptions:
    """How every agent loop of one system is configured (fixed at ``AgentSystem.open``)."""

    defaults: Settings  # an agent's settings before any message chose others
    steering_mode: QueueMode
    send_mode: QueueMode
    instructions: str  # the system prompt, before the features' ``instructions`` hooks
    new_id: Callable[[], str] = new_id  # the ids the loop gives messages and tool calls
    # Hands an ephemeral event (session id, type, data, turn id) to live subscribers.
    publish: Callable[[str, str, JSONObject, str | None], None] | None = None
    retry: RetryPolicy | None = None  # retry forever with this backoff (None: give up)
    provider_tools: tuple[ProviderTool, ...] = ()  # provider-owned tools, told beside the tools
    # How long a finished block may wait for the next stream event (``inference.hold``).
    held_block_seconds: float = DEFAULT_HELD_BLOCK_SECONDS
    # Resolves a session's ``authRef`` for its requests (``providers.credentials``).
    credentials: CredentialResolver | None = None
    # The system's metrics: committed steps, provider errors and retries (None: not counted).
    metrics: RuntimeMetrics | None = None


class AgentActor(SupervisedMixin, SimpleInboxMixin, pykka.ThreadingActor):
    """One agent's loop; supervised (a crash is restarted from the store). Its mailbox is a
    ``SimpleQueue`` (``supervision.inbox``): every step takes two or more messages.

    Started by the agent tier (``AgentTier``) under the agents supervisor, one
    incarnation at a time; each incarnation rebuilds its state from the store.

    Args:
        agent_id: The agent this actor runs.
        options: The system's loop configuration.
        store: Where it loads the agent's state and commits its plans.
        providers: The provider catalog: its model sessions, and the reset rule for switches.
        features: The system's features, whose hooks it runs.
        modules: The system's modules: this incarnation's first load restores the agent
            (their ``agent_restored_transact`` inside the load's transaction, then
            ``agent_restored``); None: no modules.
        contexts: The agent's hook contexts.
        tool_runner: Runs the agent's tool calls (in child actors).
        status: What callers wait on (idleness, compactions); this actor keeps it current.
        on_stopped: Told ``(agent_id, settled)`` once a run stopped (passivation).
        child_grace_seconds: How long a cancelled child (an aborted tool call, or any child
            of a stopping agent) may take to unwind before it is abandoned.
        base_state: The agent's base state (``runtime.base_state``): the instructions each
            request starts from, read per request; None: ``options.instructions``.
    """

    def __init__(
        self,
        agent_id: str,
        *,
        options: LoopOptions,
        store: StoreHandle,
        providers: Providers,
        features: FeatureSet,
        modules: ModuleRuntime | None = None,
        contexts: HookContexts,
        tool_runner: ToolRunner,
        status: AgentStatus,
        on_stopped: Callable[[str, bool], None],
        child_grace_seconds: float,
        base_state: BaseStateSource | None = None,
    ) -> None:
        super().__init__()
        self._agent_id = agent_id
        self._options = options
        self._base_state = base_state  # its own instructions (None: the options')
        self._store = store
        self._features = features
        self._modules = modules
        self._restored = False  # this incarnation's first load restored the agent
        self._contexts = contexts
        self._status = status
        self._on_stopped = on_stopped
        self._core = AgentLoop(
            agent_id,
            new_id=options.new_id,
            defaults=options.defaults,
            steering_mode=options.steering_mode,
            send_mode=options.send_mode,
            # A response may settle in its own transaction only if no hook can add work after
            # it and no transactional hook closes the turn, the loop or the settlement.
            eager_settle=not (features.has_action_hooks or features.overrides_any(_CLOSING)),
            retry=options.retry,
            # A run's hooks before its consumption are unobservable without these two, so
            # the acceptance that wakes an idle loop may consume for it (loop.offers).
            consume_at_acceptance=not features.overrides_any(_OPENING),
            provider_tools=policy_of(options.provider_tools),
            held_block_seconds=options.held_block_seconds,
            notify_inference=features.overrides("system_notifications_transact"),
            prepare_inference=features.overrides("prepare_inference"),
            transact_hooks=frozenset(h for h in TRANSACT_HOOKS if features.overrides(h)),
        )
        self._timers = LoopTimers()  # this incarnation's own waits (backoffs, held blocks)
        self._children = AgentChildren(self, agent_id, grace_seconds=child_grace_seconds)
        self._runner = tool_runner
        self._consumption = ConsumptionPolicy(
            agent_id, providers=providers, features=features, contexts=contexts
        )
        self._lifecycle = LifecycleHooks(
            agent_id, features=features, contexts=contexts, settings=lambda: self._core.settings
        )
        self._model_session = ModelSessionSlot(  # this incarnation's own
            agent_id, providers, auth_ref=contexts.auth_ref, credentials=options.credentials
        )
        self._streams = InferenceWorker(agent_id)  # this incarnation's own, one thread
        self._stopped: bool | None = None  # set by LoopStopped during a feed: settled?
        # Published while idle (actors.consume_claim): this incarnation's own.
        self._claims = ClaimSlot(
            self._core, status, self._consumption, take=self._take, feed=self._feed
        )
        # The run's spans (docs/observability.md); nothing is built without a tracer provider.
        self._spans = TurnSpans(
            agent_id, lambda: store.read(lambda tx: tx.turns.trace_of_live(agent_id))
        )
        self._hooks = AgentHooks(
            agent_id,
            features=features,
            contexts=contexts,
            settings=lambda: self._core.settings,
            status=status,
            store=store,
            spans=self._spans,
            new_id=options.new_id,
        )

    # -- mailbox ---------------------------------------------------------------------------

    def on_receive(self, message: Any) -> None:
        """Take one mailbox message: a loop event, or a child's report or exit (in the
        actor's thread). Raises what the loop or an effect raised: the actor crashes and its
        supervisor restarts it from the store.

        Before the loop is fed anything, a published consumption claim is withdrawn (and a
        taken one's outcome fed first), so the loop sees the consumption land before
        anything after it; a claim is published again once the loop is idle (``_feed``,
        before the status says so)."""
        self._receive(message)
        self._claims.publish()  # a message that fed the loop nothing leaves it as it was

    def _receive(self, message: Any) -> None:
        match message:
            case ChildReport() if self._children.admit(message):
                self._take(message.event)
            case ChildReport():
                pass  # an abandoned or replaced child's: discarded (and logged)
            case StreamReports(job=job):
                for report in job.take_reports():  # each as if it came on its own
                    self._receive(report)
            case ChildExited():
                self._feed_all(self._children.exited(message))
            case GraceExpired():
                self._feed_all(self._children.grace_expired(message))
            case ClaimTold(claim=claim):
                self._claims.told(claim)
            case _:
                self._take(message)

    def _take(self, message: Any) -> None:
        if not isinstance(message, EVENT_TYPES):
            log.warning("agent_unexpected_message", message=repr(message))
            return
        if isinstance(message, AbortRequested):
            self._status.abort_pending = False  # the loop takes it from here
        elif isinstance(message, TimerFired):
            self._timers.forget(message.timer_id)
        try:
            self._feed(cast(Event, message))
        except BaseException:
            # This incarnation crashed with its work unfinished: it is not idle. Its restart
            # resets the status (``start_over``); until then no waiter may see a false
            # idle because the signal that crashed it was taken.
            self._status.set_running(True)
            raise
        finally:
            if isinstance(message, _SIGNALS):
                self._status.signal_taken()

    def on_stop(self) -> None:
        """Stop this incarnation's children, then close its model session (once)."""
        self._claims.withdraw(feed=False)
        self._timers.cancel_all()
        # Children first: a model session is closed only after the streams on it stopped.
        self._children.stop_all("agent stopped")
        self._streams.close()
        self._model_session.close()  # exactly once per incarnation

    def on_failure(
        self,
        exception_type: type[BaseException] | None,
        exception_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """A crash: stop this incarnation's children and close its model session (see on_stop)."""
        # A crashed incarnation stops its children too, before its restart is told of the
        # exit (ChildExited is its thread's last act): the next never runs beside them.
        self._claims.withdraw(feed=False)
        self._timers.cancel_all()
        self._children.stop_all("agent crashed")
        self._streams.close()
        self._model_session.close()

    def _feed_all(self, events: list[Event]) -> None:
        for event in events:
            self._take(event)

    def _feed(self, first: Event) -> None:
        if not (isinstance(first, ChildStopped) and not self._core.running):
            # No event reaches a loop whose offer is out — but the last stream's stop, which
            # an idle loop only notes (the offer does not depend on it), leaves the offer out:
            # it lands right after a run ends, when the next send is most likely.
            self._claims.withdraw()
        pending: deque[Event] = deque([first])
        while pending:
            for effect in self._core.handle(pending.popleft()):
                pending.extend(self._carry_out(effect))
        # Before the status says idle: a caller that saw the agent idle finds the claim.
        self._claims.publish()
        running = self._core.running  # nothing below feeds the loop
        self._status.set_running(running)
        stopped, self._stopped = self._stopped, None
        if stopped is not None and not running:
            self._on_stopped(self._agent_id, stopped)

    # -- effects ---------------------------------------------------------------------------

    def _carry_out(self, effect: Effect) -> list[Event]:
        # Effect types are distinct classes, so the order of the cases is only their cost:
        # the ones every step carries out several times come first.
        match effect:
            case Observe():
                if effect.hook == "after_inference":
                    i = effect.ids.inference_id
                    self._spans.inference_finished(i, effect.state, effect.tokens, effect.error)
                self._hooks.observe(effect)
            case Emit(event=event):
                if isinstance(event, TextDelta) and self._options.publish is not None:
                    # Streamed text, live only (ephemeral: the finished block is durable).
                    self._options.publish(self._agent_id, TEXT_DELTA, {"text": event.delta}, None)
                if self._hooks.observes_events:  # else nothing to mark or run
                    self._hooks.on_event(event)
            case RunHook():
                return self._hooks.run(effect)
            case LoadState(records=records):
                return [self._load(records=records)]
            case Commit(plan=plan):
                return [self._commit(plan)]
            case StartInference():
                return self._start_inference(effect)
            case CancelInference(inference_id=child_id) | CancelCompaction(compaction_id=child_id):
                self._children.cancel(child_id)
            case StartTools(runs=runs, ids=ids):
                batch = self._runner.batch_tools(self._core.settings, ids)
                for run in runs:
                    self._start_tool(run, batch, effect.ids)
                return self._runner.lifetimes(runs, batch)  # which calls steering interrupts
            case CancelTools(internal_ids=ids):
                # Answered already: a call that ignores its cancellation past the grace is
                # abandoned, so it cannot hold up the next request.
                for child_id in ids:
                    self._children.cancel(child_id, abandon_after_grace=True)
            case StartCompaction():
                return self._start_compaction(effect)
            case StartTimer(timer_id=timer_id, seconds=seconds):
                self._timers.start(self.actor_ref, timer_id, seconds)
            case CancelTimer(timer_id=timer_id):
                self._timers.cancel(timer_id)
            case CompactionResolved(error=error):
                self._spans.compaction_resolved(error)
                self._status.resolve_compactions(error)
            case LoopStopped(settled=settled, error=error):
                self._spans.stopped(error)
                self._stopped = settled
        return []

    def _load(self, *, records: bool) -> Event:
        agent_id = self._agent_id
        modules = self._modules
        if not self._restored and modules is not None and modules.overrides("agent_restored"):
            return self._restore(modules, records=records)
        try:
            snapshot = self._store.read(
                lambda tx: commit_plans.load_snapshot(tx, agent_id, records=records)
            )
        except Exception as error:
            log.warning("agent_load_failed", agent_id=self._agent_id, error=repr(error))
            return LoadFailed(message=str(error) or type(error).__name__)
        return Loaded(snapshot=snapshot)

    def _restore(self, modules: ModuleRuntime, *, records: bool) -> Event:
        """This incarnation's first load, restoring the agent to the modules: the load
        reads inside a write transaction that runs their ``agent_restored_transact``; a
        failure is a failed load (the next load restores again)."""
        agent_id = self._agent_id

        def work(tx: Transaction) -> tuple[Snapshot, AgentSnapshot]:
            snapshot = commit_plans.load_snapshot(tx, agent_id, records=records)
            return snapshot, modules.restore_in(tx, agent_id)

        try:
            snapshot, restored = self._store.transact(work)
        except Exception as error:
            log.warning("agent_restore_failed", agent_id=agent_id, error=repr(error))
            modules.restore_attempted(agent_id)
            return LoadFailed(message=str(error) or type(error).__name__)
        self._restored = True
        try:
            modules.observe("agent_restored", restored)
        finally:
            modules.restore_attempted(agent_id)  # after the post-commit hooks: open waits
        return Loaded(snapshot=snapshot)

    def _commit(self, plan: Plan) -> Event:
        agent_id = self._agent_id
        ids = self._core.lifecycle_ids  # the loop and turn the plan's hooks belong to
        policy = self._consumption.with_ids(ids)
        hooks = ToolCallHooks(
            agent_id,
            features=self._features,
            contexts=self._contexts,
            settings=self._core.settings,
            ids=ids,
        )

        def work(tx: Transaction) -> Any:
            return commit_plans.execute(tx, agent_id, plan, policy, hooks, self._lifecycle)

        try:
            turn = self._spans.parent()  # traced: the turn's span is the commit's caller
            if turn is None:
                value = self._store.transact(work)
            else:
                with current(turn):
                    value = self._store.transact(work)
        except CommitOutcomeUnknownError as error:
            log.warning("agent_commit_outcome_unknown", agent_id=agent_id, error=repr(error))
            return CommitFailed(plan=plan, message=str(error), outcome_unknown=True)
        except Exception as error:
            log.warning(
                "agent_commit_failed",
                agent_id=agent_id,
                plan=type(plan).__name__,
                error=repr(error),
            )
            return CommitFailed(plan=plan, message=str(error) or type(error).__name__)
        if (metrics := self._options.metrics) is not None:
            metrics.step()
        return CommitLanded(plan=plan, value=value)

    def _start_tool(self, run: ToolRun, batch: BatchTools, ids: LifecycleIds) -> None:
        status = self._status
        # Opened on the tool's thread, in the turn's span's context handed over explicitly.
        traced = self._spans.tool_span_factory(run.call, ids, resumed=run.resumed)

        def start(token: CancelToken) -> pykka.ActorRef[Any]:
            bound = self._runner.bind(run, token, batch)

            def execute() -> ToolResultMessage:
                with status.running_tool():  # a waited compact from another loop checks it
                    return bound() if traced is None else traced(bound)

            return run_child(
                ToolCallActor, self.actor_ref, run.internal_id, run.call.call_id, execute
            )

        call = run.call
        self._children.start(run.internal_id, "tool", start, call_id=call.call_id, tool=call.name)

    def _model_session_for(self, settings: Settings) -> tuple[Any, str]:
        """The model session for this request (recreated when its configuration changed).
        Raises if the provider is unknown or a correctness hook fails."""
        state = self._base_state
        if state is None:
            base = self._options.instructions
            tools = self._runner.tool_set(settings)
        else:
            # One read of the base state: the request's instructions and its tools agree.
            current = state.current()
            base = current.instructions
            tools = self._runner.tool_set(settings, selection=selection_of(current))
        instructions = self._features.instructions(base, self._hooks.ctx_for)
        servers = self._options.provider_tools
        check_provider_tools(tools, servers)  # a feature's tool may not take a provider tool's name
        descriptors = (*tools.descriptors(), *(each.descriptor() for each in servers))
        session = self._model_session.model_session_for(settings, instructions, descriptors)
        return session, instructions

    def _start_inference(self, effect: StartInference) -> list[Event]:
        child_id = effect.inference_id
        self._spans.inference_started(child_id, effect.settings, self._core.lifecycle_ids)
        try:
            session, instructions = self._model_session_for(effect.settings)
        except Exception as error:
            # A correctness hook or an unknown provider fails this response loudly; an
            # unknown (removed) provider also stops a retry_forever run's retrying.
            failed = done_error(str(error) or type(error).__name__)
            if (metrics := self._options.metrics) is not None:
                metrics.provider(effect.settings.provider or "none").ended(failed)
            return [
                *_disabled(error),
                StreamEventArrived(inference_id=child_id, event=failed),
                ChildStopped(child_id=child_id),
            ]
        context = Context(instructions=instructions, messages=effect.messages)
        selection = _selection(effect.settings)
        trace_context = self._spans.inference_context(child_id)

        metrics = self._options.metrics
        meter = None if metrics is None else metrics.provider(effect.settings.provider or "none")

        def start(token: CancelToken) -> StreamJob:
            return self._streams.start(
                self.actor_ref,
                child_id,
                session,
                context,
                selection,
                token,
                trace_context,
                meter=meter,
            )

        self._children.start(child_id, "inference", start)
        return []

    def _start_compaction(self, effect: StartCompaction) -> list[Event]:
        from agentkeep.loop.events import CompactionFinished
        from agentkeep.types import CompactionFailed

        child_id = effect.compaction_id
        self._spans.compaction_started(child_id, effect.settings, self._core.lifecycle_ids)
        try:
            session, instructions = self._model_session_for(effect.settings)
        except Exception as error:
            outcome = CompactionFailed(kind="inference_error", message=str(error))
            return [*_disabled(error), CompactionFinished(compaction_id=child_id, outcome=outcome)]
        context = Context(instructions=instructions, messages=effect.messages)
        selection = _selection(effect.settings)

        def start(token: CancelToken) -> pykka.ActorRef[Any]:
            return run_child(
                CompactionActor, self.actor_ref, child_id, session, context, selection, token
            )

        self._children.start(child_id, "compaction", start)
        return []


def _selection(settings: Settings) -> Selection:
    return Selection(
        model=settings.model, effort=settings.effort, service_tier=settings.service_tier
    )


def _disabled(error: Exception) -> list[Event]:
    """What a failed provider resolution tells the loop besides the failure: the provider is
    not registered (removed), so a run against it stops retrying."""
    if isinstance(error, UnknownProviderError):
        return [ProviderRemoved(provider_id=error.provider_id)]
    return []
