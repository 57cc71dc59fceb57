"""The :class:`Feature` base class: a named bundle of hooks, each a no-op until overridden.

Which hooks there are (:data:`HOOKS`), what each is handed and when it runs; how the hooks of
several features compose is :class:`~agentkeep.features.feature_set.FeatureSet`'s (the rules
are in :mod:`agentkeep.features`).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

from agentkeep.errors import FeatureDefinitionError
from agentkeep.features.arguments import (
    HookContext,
    InferenceInfo,
    MessageAccepted,
    MetadataChange,
    ModelChange,
    NotificationBoundary,
    PermissionModeChange,
    TurnInfo,
)
from agentkeep.loop.actions import Action, CompactAction
from agentkeep.tools import Tool, ToolCallDecision, ToolCallInfo, ToolCallResult
from agentkeep.types import AssistantBlock, StreamEvent, SystemMessage, ToolResultMessage


class Feature:
    """Base class of a feature: override the hooks you need. ``name`` must be stable.

    A method whose name is close to a hook's but is not one (``befor_turn``) would never
    run, so defining it raises :class:`~agentkeep.errors.FeatureDefinitionError` naming the
    hook it resembles; a helper may be named anything else, or start with ``_``.
    """

    name: str = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for attribute, value in vars(cls).items():
            if attribute.startswith("_") or attribute in HOOKS or not callable(value):
                continue
            close = difflib.get_close_matches(attribute, HOOKS, n=1, cutoff=_MISSPELLING)
            if close:
                raise FeatureDefinitionError(
                    f'Feature {cls.__qualname__} defines "{attribute}", which is not a hook '
                    f'and would never run: did you mean "{close[0]}"? (A helper method that '
                    "is not a hook can start with an underscore.)"
                )

    def validate_settings(self, settings: dict[str, Any]) -> None:
        """Check this feature's entry of an agent's config at ``create``; raise
        :class:`~agentkeep.errors.InvalidConfigError` (or any error) naming what is wrong."""
        return

    def instructions(self, ctx: HookContext) -> str | None:
        """Instructions this feature adds to the agent's system prompt, or None.

        Runs before every provider request, on the agent's actor thread; the result is appended to
        the system's base instructions (a blank line between parts). Loud: raising fails the request
        rather than let it run with the wrong instructions.
        """
        return None

    def tools(self, ctx: HookContext) -> Sequence[Tool[Any, Any]]:
        """Tools this feature offers the agent, in addition to the system's.

        Runs before every provider request and when a tool batch starts. Loud: raising fails the
        request, or answers every call of the batch with the error; a duplicate (namespace, name) is
        a failure too. A session whose definition names tools (``toolbox.toolIds``) is offered
        only those of them it names (docs/sessions.md).
        """
        return ()

    def tool_catalog(self) -> Sequence[Tool[Any, Any]]:
        """Every tool :meth:`tools` may offer, whatever the agent: what a definition's
        ``toolbox.toolIds`` may name besides the system's tools (checked when a session
        starts). A tool :meth:`tools` offers that is not in it is offered only to sessions
        whose definition names no tools. Called once per session start; must not raise.
        """
        return ()

    def on_event(self, ctx: HookContext, event: StreamEvent) -> None:
        """Observe each event of a provider response as it streams (text deltas included).

        Runs on the agent's actor thread for every event, so it must be quick. Isolated: a failure
        is logged and never stops the response or other features.
        """
        return

    def before_agent_loop(self, ctx: HookContext) -> None:
        """Observe the start of a run: the agent had settled and now has work.

        Isolated: a failure is logged, never raised.
        """
        return

    def before_turn(self, ctx: HookContext, turn: TurnInfo) -> Sequence[Action] | None:
        """Runs at the start of each turn, before the model is asked.

        Durable state has just been reloaded. A failure loses only this feature's actions (it is
        logged).

        Returns:
            Actions to take (queue a message, steer, inject a system message, compact), or None.
        """
        return None

    def before_inference(self, ctx: HookContext) -> None:
        """Observe that a provider request is about to start. Isolated: a failure is logged."""
        return

    def after_inference(self, ctx: HookContext, inference: InferenceInfo) -> None:
        """Observe how a provider response ended (its state, tokens or error).

        Isolated: a failure is logged, never raised.
        """
        return

    def after_turn(self, ctx: HookContext, turn: TurnInfo) -> Sequence[Action] | None:
        """Runs when a turn has nothing left to do (``turn.aborted`` if an abort ended it).

        A failure loses only this feature's actions (it is logged).

        Returns:
            Actions to take, or None; an aborted turn's actions are dropped. Actions that add work
            start another turn.
        """
        return None

    def after_agent_loop(self, ctx: HookContext) -> Sequence[Action] | None:
        """Runs when the run is about to settle: the last turn ended and none is requested.

        A failure loses only this feature's actions (it is logged).

        Returns:
            Actions to take, or None; actions that add work reopen the run instead of settling it
            (dropped when the run may not continue: aborted, shut down, blocked).
        """
        return None

    def after_agent_settled(self, ctx: HookContext, error: str | None) -> None:
        """Observe that the agent settled: it owes no work and is idle.

        ``error`` is the run's unrecovered failure, if any. Isolated: a failure is logged.
        """
        return

    def model_changed(self, ctx: HookContext, change: ModelChange) -> SystemMessage | None:
        """Runs when a consumed message switches the agent's provider, model or profile.

        It runs inside the transaction that consumes the message (its stores and sends join it).
        When the switch resets the history (``change.was_reset``: an incompatible model, or any
        change of the profile in effect — ``change.previous_profile`` / ``change.profile``), a
        returned :class:`SystemMessage` starts the new conversation as a handoff (the first one
        returned wins); raising then rejects the switch, keeping the history and the previous
        model and profile. A failure on a compatible switch is ignored.

        Returns:
            A handoff message, or None.
        """
        return None

    def message_accepted_transact(self, ctx: HookContext, accepted: MessageAccepted) -> None:
        """Inside the transaction that consumes the message into the conversation (its
        stores and sends join it); raising rolls the consumption back and fails the turn."""
        return

    def message_accepted(self, ctx: HookContext, accepted: MessageAccepted) -> None:
        """After that transaction committed; failures are logged, never raised."""
        return

    def permission_mode_changed_transact(
        self, ctx: HookContext, change: PermissionModeChange
    ) -> None:
        """Inside the transaction that consumes the message changing the permission mode
        (its stores and sends join it), once per change; raising rolls the consumption back
        and fails the turn, like ``message_accepted_transact``."""
        return

    def permission_mode_changed(self, ctx: HookContext, change: PermissionModeChange) -> None:
        """After that transaction committed, once per change; failures are logged, never
        raised."""
        return

    def metadata_changed_transact(self, ctx: HookContext, change: MetadataChange) -> None:
        """Inside the transaction that merges the metadata; raising rolls the update back
        and ``update_metadata`` raises it."""
        return

    def metadata_changed(self, ctx: HookContext, change: MetadataChange) -> None:
        """After the merge committed; failures are logged, never raised."""
        return

    # -- transactional lifecycle hooks (docs/hooks.md) ---------------------------------------
    # Each runs inside the store transaction that makes its lifecycle fact durable, on the
    # store writer's thread, told the lifecycle ids (docs/lifecycle.md); its stores and sends
    # join that transaction. Features chain in order; raising rolls the transaction back and
    # propagates (what the loop does then is in docs/hooks.md). One no feature overrides costs
    # nothing: no commit carries it.

    def before_agent_loop_transact(self, ctx: HookContext) -> None:
        """Inside the commit that opens a loop (a run's first turn, or the turn that reopens
        it after ``after_agent_loop``'s actions): the loop's and turn's ids are written with
        the owed work in it. Raising fails the turn (its note is appended, the work stays
        owed). Runs before ``before_agent_loop``."""
        return

    def before_turn_transact(self, ctx: HookContext, turn: TurnInfo) -> None:
        """Inside the commit that opens each turn (its ids written with the owed work),
        after ``before_agent_loop_transact`` when the turn opens a loop. Raising fails the
        turn (its note is appended, the work stays owed). Runs before ``before_turn``."""
        return

    def before_inference_transact(self, ctx: HookContext) -> None:
        """Inside the commit that opens a provider request (its id written with the owed
        work); the request starts only once it committed. Raising fails the turn before the
        request is made. Runs before ``before_inference``."""
        return

    def on_event_transact(self, ctx: HookContext, block: AssistantBlock) -> None:
        """Inside the commit that makes a completed block durable: a response's block
        (``ctx.inference_id`` names its request), or the assistant call a consumed tool
        request appends (in the consumption transaction, after ``message_accepted_transact``;
        ``ctx.inference_id`` is None: no request is made up for it). A hidden server call's
        block is not told. Raising rolls the block back and fails the turn."""
        return

    def after_inference_transact(self, ctx: HookContext, inference: InferenceInfo) -> None:
        """Inside the commit that ends a provider response (its last blocks, its measurement),
        or, for a cancelled one, a commit of its own behind its blocks. Raising rolls the
        response's end back and fails the turn (the question stays owed). Runs after
        ``after_inference``, which is observed as the response ends, before this commit."""
        return

    def after_turn_transact(self, ctx: HookContext, turn: TurnInfo) -> None:
        """Inside the turn's closing commit, once it has nothing left to do
        (``turn.aborted`` if an abort ended it); ``after_turn`` runs once it committed.
        Raising stops the run unsettled, its work kept owed (the next start runs it again)."""
        return

    def after_agent_loop_transact(self, ctx: HookContext) -> None:
        """Inside the loop's closing commit, before ``after_agent_loop``. Raising stops the
        run unsettled, its work kept owed (the next start runs it again)."""
        return

    def after_agent_settled_transact(self, ctx: HookContext, error: str | None) -> None:
        """Inside the settling transaction (the owed fact erased; the run's store still
        readable, erased after it), told ``ctx.settlement_id``: persisted with the owed work
        before this hook runs, the same after a restart. Raising keeps the agent owed (a
        later start settles again, under the same id). Runs before ``after_agent_settled``."""
        return

    # -- end of the transactional lifecycle hooks ---------------------------------------------

    # -- tool calls (see agentkeep.tools.hooks) ----------------------------------------------

    def before_tool_call_transact(self, ctx: HookContext, call: ToolCallInfo) -> None:
        """Inside the transaction that dispatches ``call``'s batch; raising fails the turn."""
        return

    def before_tool_call(self, ctx: HookContext, call: ToolCallInfo) -> ToolCallDecision | None:
        """Leave a validated call alone (None), amend it, or answer it instead of running."""
        return None

    def after_tool_call(self, ctx: HookContext, call: ToolCallInfo, result: ToolCallResult) -> None:
        """Observe what a call produced (failures are logged, never raised)."""
        return

    def after_tool_call_transact(
        self, ctx: HookContext, call: ToolCallInfo, result: ToolResultMessage
    ) -> None:
        """Inside the transaction that appends ``call``'s result; raising blocks the batch."""
        return

    # -- compaction and the history KV ------------------------------------------

    def before_compaction(self, ctx: HookContext) -> None:
        """Observe that a compaction is about to ask the provider for its summary (once per
        attempt; none for an empty conversation, which has nothing to summarise).
        ``ctx.history_kv`` is still the history about to be replaced. Isolated: a failure is
        logged, never raised."""
        return

    def history_erased_transact(self, ctx: HookContext) -> None:
        """Inside the compaction's replacement transaction, after the old records and the
        history KV were erased and before the summary replacing them is appended: its writes
        (to ``ctx.history_kv``, which starts empty here, or any store) commit or roll back
        with the replacement. Raising rolls the whole compaction back (the history and its
        KV stay) and the compaction fails."""
        return

    def after_compaction(self, ctx: HookContext) -> None:
        """Observe that a compaction's replacement committed (``ctx.history_kv`` is the new
        history's). Isolated: a failure is logged, never raised."""
        return

    # -- notices at exact positions (docs/notices.md) ----------------------------------------

    def system_notifications_transact(
        self, ctx: HookContext, boundary: NotificationBoundary
    ) -> Sequence[SystemMessage] | None:
        """System notices to append at an exact history position, inside the transaction
        that appends there (its stores and sends join it).

        ``boundary`` is a :class:`~agentkeep.features.MessageBoundary` (right before a
        queued message's record — each message of an "all" batch on its own — after any
        model or profile reset its consumption causes; inside the consumption transaction)
        or an :class:`~agentkeep.features.InferenceBoundary` (right before a provider
        request, after tool results and compaction settled, after "Continue from where you
        left off." and the injected notices; inside the inference stage's opening
        transaction, with the request's ids). The notices of every feature are appended in
        feature order; they fire no acceptance hooks. Raising rolls back every notice and
        the consumption (or the stage), and no request is made: the turn fails like a
        refused commit of that stage. Keep it bounded and free of outside effects.

        Returns:
            The notices to append there (possibly none).
        """
        return None

    def prepare_inference(self, ctx: HookContext) -> CompactAction | None:
        """Runs after queued input joined the conversation, right before a possible
        provider request (``ctx.context_tokens``: the last measurement).

        Returning :class:`~agentkeep.CompactAction` compacts the conversation first (the
        replacement is written with the inference still owed, in one transaction); then this
        hook runs again on the replacement. A compaction that failed is not attempted again
        while the measurement is unchanged, nor is a replacement nothing measured yet
        compacted again. A failure loses only this feature's decision (it is logged).

        Returns:
            ``CompactAction()`` to compact before the request, or None.
        """
        return None


# Every hook a feature can override (and ``validate_settings``), by name.
HOOKS: frozenset[str] = frozenset(
    name for name, value in vars(Feature).items() if callable(value) and not name.startswith("_")
)
# How alike a method's name and a hook's must be to count as a misspelling (difflib's
# ratio): one wrong, missing or extra letter in a hook name scores above 0.9, while helper
# names that merely share a prefix (``after_note``, ``tool_started``) stay below 0.75.
_MISSPELLING = 0.8
