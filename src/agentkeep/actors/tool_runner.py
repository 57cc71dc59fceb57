"""Running one tool call (in its child's thread): resolve, validate, let the features decide
(``before_tool_call``), execute, validate the result, render it, let the features observe
(``after_tool_call``) — every failure an error result for the model, never an exception."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from agentkeep.actors.call_context import CallCommits, CallContext
from agentkeep.actors.hook_contexts import HookContexts
from agentkeep.actors.loop_thread import inside_loop
from agentkeep.errors import AgentkeepError, ToolCommitError
from agentkeep.features import Feature, FeatureSet, HookContext
from agentkeep.features.tool_calls import decide
from agentkeep.loop.effects import LifecycleIds, ToolRun
from agentkeep.loop.events import Event, ToolLifetimes
from agentkeep.loop.texts import ABORTED_CALL
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.kv import ScopedKV
from agentkeep.providers.protocol import CancelToken
from agentkeep.refs import AgentSystemRef
from agentkeep.runtime.kv_areas import CALL_AREA
from agentkeep.runtime.tool_claims import claim_result
from agentkeep.tools import Tool, ToolError, ToolOutput, ToolSet, validate_arguments
from agentkeep.tools.hooks import ToolCallInfo, ToolCallResult, failed
from agentkeep.tools.results import execute_tool, validate_result
from agentkeep.types import Settings, TextBlock, ToolResultMessage

INTERRUPTED_CALL = "The tool call was interrupted by a restart and was not retried."
NOT_RESUMED_CALL = "The tool call could not be confirmed uncommitted, so it was not run again."
ANSWERED_MEANWHILE_CALL = "The tool call was answered meanwhile, so it was not run again."
CUT_OFF_CLAIM = (
    'ctx.commit was refused: the call of "{tool}" is no longer live (it was cut off from its '
    "agent before its result committed)."
)
_NO_IDS = LifecycleIds()


#: ``tool_set``'s "no selection given": the runner asks its own.
_ASK: Final = object()


@dataclass(frozen=True, kw_only=True)
class BatchTools:
    """What the calls of one batch run against: the tools of the moment (or why there are
    none: a failing tools hook's error, which every call then answers), the
    agent's settings, which their hooks see, and the lifecycle ids their plain hooks and
    the tools are told (the loop, the turn, the request whose response asked for them)."""

    tools: ToolSet | str
    settings: Settings
    ids: LifecycleIds = _NO_IDS


class ToolRunner:
    """Runs one agent's tool calls, each in its own child's thread. Stateless once made (one
    per agent, by ``AgentFactory``), so concurrent calls share it.

    Args:
        agent_id: The agent whose calls these are.
        features: The system's features (their ``tools`` and tool-call hooks).
        tools: The system's own tools, offered before the features'.
        contexts: The agent's hook contexts, and the calls' stores.
        system_ref: How a tool reaches the system (``ToolContext.system``).
        selection: The ids (:attr:`~agentkeep.tools.Tool.id`) of the only tools it offers,
            the system's and the features' alike (a session's ``toolbox.toolIds``); None:
            every tool. A function is asked each time (the agent's mutable base state).
    """

    def __init__(
        self,
        agent_id: str,
        *,
        features: FeatureSet,
        tools: Sequence[Tool[Any, Any]],
        contexts: HookContexts,
        system_ref: AgentSystemRef,
        selection: frozenset[str] | Callable[[], frozenset[str] | None] | None = None,
    ) -> None:
        self._agent_id = agent_id
        self._features = features
        self._selection = selection
        self._tools = tools
        self._contexts = contexts
        self._system_ref = system_ref

    def tool_set(
        self, settings: Settings, *, selection: frozenset[str] | object | None = _ASK
    ) -> ToolSet:
        """The tools this agent offers now: the system's, then each feature's (only those
        its selection names, if it has one: ``selection`` when given, read already with the
        request's instructions, else the runner's own). Raises on a failing tools hook or a
        duplicate (namespace, name) — a correctness failure."""
        ctx_for = lambda feature: self._contexts.for_feature(feature, settings)  # noqa: E731
        if selection is _ASK:
            selection = self._selection() if callable(self._selection) else self._selection
        assert selection is None or isinstance(selection, frozenset)
        own = self._tools if selection is None else [t for t in self._tools if t.id in selection]
        offered = self._features.tools(own, ctx_for)
        if selection is not None:
            offered = [tool for tool in offered if tool.id in selection]
        return ToolSet(offered)

    def batch_tools(self, settings: Settings, ids: LifecycleIds | None = None) -> BatchTools:
        """What a batch starting now runs against, its calls told ``ids``; a failing tools
        hook is kept as the error every call of the batch answers, never
        raised."""
        try:
            tools: ToolSet | str = self.tool_set(settings)
        except Exception as error:
            tools = str(error) or type(error).__name__
        return BatchTools(tools=tools, settings=settings, ids=ids or _NO_IDS)

    def lifetimes(self, runs: Sequence[ToolRun], batch: BatchTools) -> list[Event]:
        """The lifetime flags of the tools ``runs`` name, for the loop: which calls newly
        accepted steering interrupts and which a drain leaves pending (none: no event)."""
        if isinstance(batch.tools, str):
            return []
        steerable: list[str] = []
        reloadable: list[str] = []
        for run in runs:
            tool = batch.tools.for_call(run.call)
            if tool is not None and tool.steerable:
                steerable.append(run.internal_id)
            if tool is not None and tool.reloadable:
                reloadable.append(run.internal_id)
        if not (steerable or reloadable):
            return []
        return [ToolLifetimes(steerable=tuple(steerable), reloadable=tuple(reloadable))]

    def bind(
        self, run: ToolRun, cancel: CancelToken, batch: BatchTools
    ) -> Callable[[], ToolResultMessage]:
        """The work of one call, to run in the call's own thread. The work returns the call's
        result, a failure of any kind being an error result for the model; it raises only
        what escapes the tool machinery itself (a bug)."""

        def execute() -> ToolResultMessage:
            # The hooks' call stores expire when the call's work ends or it is cancelled
            # (answered without it: nothing may write behind that answer).
            alive = [True]
            live = lambda: alive[0] and not cancel.cancelled  # noqa: E731
            try:
                with inside_loop(self._agent_id):  # a hook or tool waiting on its agent is refused
                    return self._run(run, cancel, batch, live)
            finally:
                alive[0] = False

        return execute

    def _run(
        self,
        run: ToolRun,
        cancel: CancelToken,
        batch: BatchTools,
        alive: Callable[[], bool],
    ) -> ToolResultMessage:
        call = run.call
        tools, settings, ids = batch.tools, batch.settings, batch.ids
        if isinstance(tools, str):
            return _error(call.call_id, tools)
        tool = tools.for_call(call)
        if tool is not None and run.resumed and not _may_run_again(tool):
            # It may have had its side effect before the crash: never run it twice.
            return _error(call.call_id, INTERRUPTED_CALL)
        if tool is not None and run.resumed:
            settled = self._committed_meanwhile(run)
            if settled is not None:
                return settled  # an earlier run's claim landed after the reload read
        args = validate_arguments(tool, call)
        if isinstance(args, ToolError) or tool is None:
            # A refused call reaches no tool hook.
            return _error(call.call_id, args.message if isinstance(args, ToolError) else "")
        info = ToolCallInfo(
            call_id=run.internal_id,
            call=call,
            requested=call,
            tool=tool,
            arguments=args,
            resumed=run.resumed,
            cancel=cancel,
            # The mode the batch started under (a steer consumed meanwhile changes the
            # next batch's, never this one's).
            permission_mode=settings.permission_mode,
        )

        def ctx_for(feature: Feature) -> HookContext:
            return self._contexts.for_feature(
                feature, settings, call_id=run.internal_id, alive=alive, ids=ids
            )

        features = self._features
        info, outcome = decide(features.features, ctx_for, info, tools)
        if outcome is None:
            outcome = self._execute(run, info, cancel, ids, settings)
        features.observe("after_tool_call", ctx_for, info, outcome)
        return ToolResultMessage(
            call_id=call.call_id, content=outcome.content, is_error=outcome.is_error
        )

    def _committed_meanwhile(self, run: ToolRun) -> ToolResultMessage | None:
        """Before a resumed call runs again: the result an earlier run committed after the
        reload read the call as uncommitted, or why the call must not run; None: run it.

        An earlier run of this call may have been cut off from its agent (abandoned after a
        crash's grace, or by a commit whose outcome was unknown) with its claim already on
        its way to the writer. Its run was cancelled before this run was started, and a claim
        checks its run's cancellation on the writer (``_execute_plain``; a transactional
        run checks it as its transaction starts): asked on the writer now, either that claim
        committed before this question, and its result is reused, or it will be refused. So
        a committed call is never run again (X2)."""
        agent_id, internal_id = self._agent_id, run.internal_id

        def read(tx: Transaction) -> tuple[bool, ToolResultMessage | None]:
            for pending in tx.calls.pending(agent_id):
                if pending.internal_id == internal_id:
                    return True, pending.committed
            return False, None

        try:
            still_pending, committed = self._contexts.store.transact(read)
        except AgentkeepError as error:
            return _error(run.call.call_id, f"{NOT_RESUMED_CALL} ({error})")
        if committed is not None:
            return committed
        if not still_pending:
            return _error(run.call.call_id, ANSWERED_MEANWHILE_CALL)
        return None

    def _definition_fields(self, settings: Settings) -> dict[str, Any]:
        """What a call's context tells of the agent: the batch's settings, its feature
        configuration and its session's definition references."""
        contexts = self._contexts
        return {
            "settings": settings,
            "config": contexts.config,
            "cwd": contexts.cwd,
            "resources": contexts.resources,
            "driver_config": contexts.driver_config,
        }

    def _execute(
        self,
        run: ToolRun,
        info: ToolCallInfo,
        cancel: CancelToken,
        ids: LifecycleIds,
        settings: Settings,
    ) -> ToolCallResult:
        tool = info.tool
        assert tool is not None  # decide() resolves every call it lets run
        if run.resumed and not _may_run_again(tool):
            return failed(INTERRUPTED_CALL)  # redirected to a tool that must not run twice
        if cancel.cancelled:
            return failed(ABORTED_CALL)  # aborted while the hooks decided: never start it
        if tool.transactional:
            return self._execute_in_transaction(run, info, cancel, ids, settings)
        return self._execute_plain(run, info, cancel, ids, settings)

    def _execute_plain(
        self,
        run: ToolRun,
        info: ToolCallInfo,
        cancel: CancelToken,
        ids: LifecycleIds,
        settings: Settings,
    ) -> ToolCallResult:
        """An ordinary tool, in the call's thread: each of its writes is its own transaction;
        ``ctx.commit`` claims its result in one more."""
        tool = info.tool
        assert tool is not None
        contexts = self._contexts
        store = contexts.store
        agent_id, internal_id = self._agent_id, run.internal_id

        def claim(tx: Transaction, result: ToolResultMessage) -> bool:
            # The fence (with ``_committed_meanwhile``): checked again on the writer, so a
            # claim that passed ``commit``'s check before its run was cut off never commits
            # behind the resumed run's question (flaky_store seed 6827).
            if cancel.cancelled:
                raise ToolCommitError(CUT_OFF_CLAIM.format(tool=tool.name))
            return claim_result(tx, agent_id, internal_id, result)

        commits = CallCommits(
            tool,
            run.call.call_id,
            cancel,
            lambda result: store.transact(lambda tx: claim(tx, result)),
        )
        # The call's store expires when the call returns, when it is cancelled (an aborted
        # call is answered at once, so its thread, running on unobserved, must not write
        # behind that answer, invariant I20) and when a result was committed (erased with it).
        ctx = CallContext(
            agent_id=agent_id,
            call_id=internal_id,
            provider_call_id=info.provider_call_id,
            cancel=cancel,
            kv=self._contexts.call_kv(internal_id, lambda: commits.open),
            system=self._system_ref,
            permission_mode=info.permission_mode,  # the batch's, or a hook's for this run
            commits=commits,
            loop_id=ids.loop_id,
            turn_id=ids.turn_id,
            inference_id=ids.inference_id,
            # Expires with the call's lifetime, and with the history it was made in.
            open_history_kv=lambda: contexts.tool_history_kv(tool.id).until(
                lambda: commits.running
            ),
            **self._definition_fields(settings),
        )
        try:
            output, value = execute_tool(tool, ctx, info.arguments)
        finally:
            commits.close()  # no commit after the return; the call's store expires
        if commits.result is not None:  # the first commit wins; the return is ignored
            committed = commits.result
            return ToolCallResult(
                content=committed.content,
                is_error=committed.is_error,
                executed=True,
                value=commits.value,
            )
        return _outcome(output, value)

    def _execute_in_transaction(
        self,
        run: ToolRun,
        info: ToolCallInfo,
        cancel: CancelToken,
        ids: LifecycleIds,
        settings: Settings,
    ) -> ToolCallResult:
        """A transactional tool: execute, validation, rendering and the result's claim in
        one store transaction on the writer's thread. Any failure rolls the tool's writes
        back; the call then answers an error result through the batch as usual."""
        tool = info.tool
        assert tool is not None
        agent_id, internal_id = self._agent_id, run.internal_id

        def work(tx: Transaction) -> tuple[ToolResultMessage, Any]:
            if cancel.cancelled:
                # Aborted while queued: never start it.
                raise _RolledBackError(ABORTED_CALL, ran=False)
            commits = CallCommits(
                tool,
                run.call.call_id,
                cancel,
                lambda result: claim_result(tx, agent_id, internal_id, result),
            )
            kv = ScopedKV.in_transaction(tx, "agent", agent_id, CALL_AREA, internal_id)
            ctx = CallContext(
                agent_id=agent_id,
                call_id=internal_id,
                provider_call_id=info.provider_call_id,
                cancel=cancel,
                kv=kv.until(lambda: commits.open),
                system=self._system_ref.within(tx),  # its sends commit with the result
                permission_mode=info.permission_mode,
                commits=commits,
                loop_id=ids.loop_id,
                turn_id=ids.turn_id,
                inference_id=ids.inference_id,
                # Bound to the call's transaction (and to the history it was made in).
                open_history_kv=lambda: self._contexts.tool_history_kv(tool.id, tx),
                **self._definition_fields(settings),
            )
            try:
                with inside_loop(agent_id):
                    value = tool.execute(ctx, info.arguments)
            except BaseException as error:  # never let a tool's raise reach the writer
                raise _RolledBackError(f'The tool "{tool.name}" failed: {error}') from error
            finally:
                commits.close()
            if commits.result is not None:  # committed from inside: the return is ignored
                return commits.result, commits.value
            output = validate_result(tool, value)
            if isinstance(output, ToolError):
                raise _RolledBackError(output.message)
            result = ToolResultMessage(
                call_id=run.call.call_id, content=output.content, is_error=output.is_error
            )
            # The automatic result commit. Refused (the call was answered meanwhile, by an
            # abort): the tool's writes must not outlive a result that never landed.
            if not claim_result(tx, agent_id, internal_id, result):
                raise _RolledBackError(ABORTED_CALL)
            return result, value

        try:
            result, value = self._contexts.store.transact(work)
        except _RolledBackError as rolled:
            return failed(rolled.message) if not rolled.ran else _ran_and_failed(rolled.message)
        except AgentkeepError as error:  # the store failed the transaction: nothing of it stays
            return _ran_and_failed(f'The tool "{tool.name}" could not commit: {error}')
        return ToolCallResult(
            content=result.content, is_error=result.is_error, executed=True, value=value
        )


class _RolledBackError(Exception):
    """Raised out of a transactional tool's transaction to roll its writes back; carries
    the error result the call answers instead."""

    def __init__(self, message: str, *, ran: bool = True) -> None:
        super().__init__(message)
        self.message = message
        self.ran = ran


def _may_run_again(tool: Tool[Any, Any]) -> bool:
    """Whether a call interrupted by a crash may run again: a durable or a reloadable tool
    says so (a reloadable one is retry-safe). ``transactional`` alone does not: the
    flags stay apart, and a tool's effects outside the store are its own."""
    return tool.durable or tool.reloadable


def _ran_and_failed(text: str) -> ToolCallResult:
    return ToolCallResult(content=(TextBlock(text=text),), is_error=True, executed=True)


def _outcome(output: ToolOutput | ToolError, value: Any) -> ToolCallResult:
    if isinstance(output, ToolError):
        return _ran_and_failed(output.message)
    return ToolCallResult(
        content=output.content, is_error=output.is_error, executed=True, value=value
    )


def _error(call_id: str, text: str) -> ToolResultMessage:
    return ToolResultMessage(call_id=call_id, content=(TextBlock(text=text),), is_error=True)
