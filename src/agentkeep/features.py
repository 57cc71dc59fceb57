"""Features: named bundles of hooks, composed in order into one agent's hooks.

A :class:`Feature` overrides any subset of the hook methods below; one instance serves every
agent of a system and learns which agent a hook runs for from the :class:`HookContext` it is
handed. Composition rules (seed: AgentFeature), kept by :class:`FeatureSet`:

- observing hooks (``on_event``, ``before_agent_loop``, ``before_inference``,
  ``after_inference``, ``after_agent_settled``) fan out with per-feature isolation: one
  failing feature never silences the others, and never fails the run;
- ``instructions`` and ``tools`` concatenate after the system's base state and stay loud: a
  failing feature fails the turn rather than run with a wrong configuration;
- action hooks (``before_turn``, ``after_turn``, ``after_agent_loop``) concatenate their
  actions; a failing feature loses only its own;
- ``permission_mode_changed_transact`` (like ``message_accepted_transact``) chains in order
  inside the consumption transaction and propagates a failure, rolling the consumption back;
  ``permission_mode_changed`` observes after it committed, with per-feature isolation;
- ``model_changed``: every feature observes; the first returned handoff wins; a failure is
  re-raised only when the change resets the history (which rejects the switch);
- tool-call hooks (:mod:`agentkeep.tool_hooks`): the transactional ones
  (``before_tool_call_transact``, ``after_tool_call_transact``) chain in order and propagate
  a failure, rolling their transaction back; ``before_tool_call`` chains amendments, the
  first answer wins, and a failure becomes the call's error result; ``after_tool_call``
  observes with per-feature isolation.

The values hooks are handed (:class:`HookContext`, :class:`TurnInfo`, :class:`ModelChange`
and the rest) are defined in ``_feature_arguments`` and re-exported here: import them from
this module.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentkeep._feature_arguments import HookContext as HookContext
from agentkeep._feature_arguments import InferenceInfo as InferenceInfo
from agentkeep._feature_arguments import MessageAccepted as MessageAccepted
from agentkeep._feature_arguments import MetadataChange as MetadataChange
from agentkeep._feature_arguments import ModelChange as ModelChange
from agentkeep._feature_arguments import PermissionModeChange as PermissionModeChange
from agentkeep._feature_arguments import TurnInfo as TurnInfo
from agentkeep.errors import FeatureDefinitionError, InvalidConfigError
from agentkeep.logs import get_logger
from agentkeep.loop.actions import Action
from agentkeep.types import StreamEvent, SystemMessage

if TYPE_CHECKING:
    from agentkeep.tool_hooks import ToolCallDecision, ToolCallInfo, ToolCallResult
    from agentkeep.tools import Tool
    from agentkeep.types import ToolResultMessage

log = get_logger(__name__)


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

    # -- tool calls (see agentkeep.tool_hooks) ----------------------------------------------

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


# Every hook a feature can override (and ``validate_settings``), by name.
HOOKS: frozenset[str] = frozenset(
    name for name, value in vars(Feature).items() if callable(value) and not name.startswith("_")
)
# How alike a method's name and a hook's must be to count as a misspelling (difflib's
# ratio): one wrong, missing or extra letter in a hook name scores above 0.9, while helper
# names that merely share a prefix (``after_note``, ``tool_started``) stay below 0.75.
_MISSPELLING = 0.8


def _overrides(feature: Feature, hook: str) -> bool:
    """Whether ``feature`` (its class, or the instance itself) replaces ``hook``'s no-op."""
    if hook in getattr(feature, "__dict__", {}):
        return True
    return getattr(type(feature), hook) is not getattr(Feature, hook)


class FeatureSet:
    """The features of a system, composed by the rules in the module docstring."""

    def __init__(self, features: Sequence[Feature]) -> None:
        names = [f.name for f in features]
        for feature in features:
            if not isinstance(feature, Feature) or not feature.name:
                raise InvalidConfigError(f"a feature needs a non-empty name: {feature!r}")
        duplicates = {n for n in names if names.count(n) > 1}
        if duplicates:
            raise InvalidConfigError(f"feature names must be unique: {sorted(duplicates)}")
        self.features = tuple(features)
        # The features that override each hook, in order, worked out once (issue 17: every
        # hook of every step asked each feature, and made each one a context). Only they are
        # called: a hook a feature leaves alone is the base class's no-op, so skipping it
        # changes nothing but the cost (no context is made for it).
        self._overriding = {
            hook: tuple(f for f in self.features if _overrides(f, hook)) for hook in HOOKS
        }

    @property
    def has_action_hooks(self) -> bool:
        """Whether any feature overrides a hook that can add work after a response."""
        return any(self.overrides(h) for h in ("before_turn", "after_turn", "after_agent_loop"))

    def overrides(self, hook: str) -> bool:
        """Whether any feature overrides ``hook``."""
        return bool(self._hooked(hook))

    def _hooked(self, hook: str) -> tuple[Feature, ...]:
        """The features that override ``hook``, in order. A misspelled hook name in the
        runtime fails loudly, not as a logged warning."""
        try:
            return self._overriding[hook]
        except KeyError:
            raise ValueError(f"{hook!r} is not a feature hook") from None

    def get(self, name: str) -> Feature | None:
        """The feature named ``name``, or None."""
        return next((f for f in self.features if f.name == name), None)

    def observe(self, hook: str, ctx_for: Any, *args: Any) -> None:
        """Run an observing hook on every feature; failures are logged, never raised."""
        for feature in self._hooked(hook):
            self._call(feature, hook, ctx_for, args, propagate=False)

    def actions(self, hook: str, ctx_for: Any, *args: Any) -> list[Action]:
        """Concatenate the actions of an action hook; a failing feature loses its own."""
        collected: list[Action] = []
        for feature in self._hooked(hook):
            try:
                collected.extend(getattr(feature, hook)(ctx_for(feature), *args) or ())
            except Exception as error:
                log.warning(
                    "feature_hook_failed", feature=feature.name, hook=hook, error=repr(error)
                )
        return collected

    def transact(self, hook: str, ctx_for: Any, *args: Any) -> None:
        """Run a transactional hook on every feature in order; a failure propagates (and
        rolls the hook's transaction back)."""
        for feature in self._hooked(hook):
            self._call(feature, hook, ctx_for, args, propagate=True)

    @staticmethod
    def _call(
        feature: Feature, hook: str, ctx_for: Any, args: tuple[Any, ...], *, propagate: bool
    ) -> None:
        """One feature's hook; a failure is logged with the feature's name, then raised
        again only if ``propagate``."""
        try:
            getattr(feature, hook)(ctx_for(feature), *args)
        except Exception as error:
            log.warning("feature_hook_failed", feature=feature.name, hook=hook, error=repr(error))
            if propagate:
                raise

    def instructions(self, base: str, ctx_for: Any) -> str:
        """Base instructions then each feature's, non-empty parts joined by a blank line."""
        parts = [base] + [
            f.instructions(ctx_for(f)) or "" for f in self._overriding["instructions"]
        ]
        return "\n\n".join(p for p in parts if p)

    def tools(self, base: Sequence[Tool[Any, Any]], ctx_for: Any) -> list[Tool[Any, Any]]:
        """The system's tools, then each feature's; a failing ``tools`` hook propagates."""
        collected = list(base)
        for feature in self._overriding["tools"]:
            collected.extend(feature.tools(ctx_for(feature)))
        return collected

    def tool_catalog(self) -> list[Tool[Any, Any]]:
        """Every tool the features may offer (their :meth:`Feature.tool_catalog`), in order."""
        return [tool for f in self._overriding["tool_catalog"] for tool in f.tool_catalog()]

    def model_changed(self, ctx_for: Any, change: ModelChange) -> SystemMessage | None:
        """Every feature observes the switch; the first handoff returned wins.

        Raises:
            Exception: the first failure of a hook, only when the switch resets the history
                (which rejects it); otherwise failures are ignored.
        """
        handoff: SystemMessage | None = None
        failure: Exception | None = None
        for feature in self._overriding["model_changed"]:
            try:
                answer = feature.model_changed(ctx_for(feature), change)
            except Exception as error:
                failure = failure or error
                continue
            if handoff is None and answer is not None:
                handoff = answer
        if failure is not None and change.was_reset:
            raise failure
        return handoff
