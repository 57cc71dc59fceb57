""":class:`FeatureSet`: the features of a system, their hooks composed in order by the rules
of :mod:`agentkeep.features`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentkeep.errors import InvalidConfigError
from agentkeep.features.arguments import ModelChange, NotificationBoundary
from agentkeep.features.feature import HOOKS, Feature
from agentkeep.logs import get_logger
from agentkeep.loop.actions import Action, CompactAction
from agentkeep.tools import Tool
from agentkeep.types import SystemMessage

log = get_logger(__name__)


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
        # The features that override each hook, in order, worked out once (every
        # hook of every step asked each feature, and made each one a context). Only they are
        # called: a hook a feature leaves alone is the base class's no-op, so skipping it
        # changes nothing but the cost (no context is made for it).
        self._overriding = {
            hook: tuple(f for f in self.features if _overrides(f, hook)) for hook in HOOKS
        }

    def join(self, features: Sequence[Feature]) -> None:
        """Append ``features`` (a system's modules' hooks, in module order) after the
        features already here. Only before any agent runs: an agent's actor reads which
        hooks are overridden when it is made.

        Raises:
            InvalidConfigError: a name is empty or taken.
        """
        joined = FeatureSet([*self.features, *features])
        self.features = joined.features
        self._overriding = joined._overriding

    @property
    def has_action_hooks(self) -> bool:
        """Whether any feature overrides a hook that can add work after a response."""
        return any(self.overrides(h) for h in ("before_turn", "after_turn", "after_agent_loop"))

    def overrides(self, hook: str) -> bool:
        """Whether any feature overrides ``hook``."""
        return bool(self._hooked(hook))

    def overrides_any(self, hooks: Sequence[str]) -> bool:
        """Whether any feature overrides any of ``hooks``."""
        return any(self._hooked(hook) for hook in hooks)

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

    def system_notifications(
        self, ctx_for: Any, boundary: NotificationBoundary
    ) -> list[SystemMessage]:
        """Every feature's ``system_notifications_transact`` notices for ``boundary``, in
        feature order. Transactional: a failure propagates (rolling the boundary's
        transaction back), and so does a notice that is not a :class:`SystemMessage`
        (a hook never adds user content)."""
        hook = "system_notifications_transact"
        notices: list[SystemMessage] = []
        for feature in self._hooked(hook):
            try:
                answer = feature.system_notifications_transact(ctx_for(feature), boundary)
                for notice in answer or ():
                    if not isinstance(notice, SystemMessage):
                        raise TypeError(f"a notice must be a SystemMessage: {notice!r}")
                    notices.append(notice)
            except Exception as error:
                log.warning(
                    "feature_hook_failed", feature=feature.name, hook=hook, error=repr(error)
                )
                raise
        return notices

    def prepare_inference(self, ctx_for: Any) -> bool:
        """Whether any feature's ``prepare_inference`` asks for a compaction before the
        request; a failing feature loses only its own decision (logged)."""
        compact = False
        for feature in self._hooked("prepare_inference"):
            try:
                answer = feature.prepare_inference(ctx_for(feature))
            except Exception as error:
                log.warning(
                    "feature_hook_failed",
                    feature=feature.name,
                    hook="prepare_inference",
                    error=repr(error),
                )
                continue
            compact = compact or isinstance(answer, CompactAction)
        return compact
