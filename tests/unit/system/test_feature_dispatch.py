"""Feature-hook dispatch: only the features that override a hook are called for
it, and no context is made for the others (each context builds three scoped stores, and a
step runs a dozen hooks)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

import agentkeep as ak
from agentkeep.features import FeatureSet
from agentkeep.loop.actions import Action, CompactAction


class Watcher(ak.Feature):
    name = "watcher"

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def on_event(self, ctx: ak.HookContext, event: Any) -> None:
        self.seen.append(("on_event", ctx, event))

    def after_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> Sequence[Action] | None:
        return [CompactAction()]


class Quiet(ak.Feature):
    name = "quiet"


class Instructor(ak.Feature):
    name = "instructor"

    def instructions(self, ctx: ak.HookContext) -> str | None:
        return f"be brief ({ctx})"


def _contexts() -> tuple[list[str], Any]:
    asked: list[str] = []

    def ctx_for(feature: ak.Feature) -> Any:
        asked.append(feature.name)
        return f"ctx of {feature.name}"

    return asked, ctx_for


def test_a_hook_asks_only_the_features_that_override_it_for_a_context() -> None:
    watcher = Watcher()
    features = FeatureSet([Quiet(), watcher, Instructor()])
    asked, ctx_for = _contexts()

    features.observe("on_event", ctx_for, "e1")
    assert asked == ["watcher"]
    assert watcher.seen == [("on_event", "ctx of watcher", "e1")]

    asked.clear()
    assert [type(a).__name__ for a in features.actions("after_turn", ctx_for, None)] == [
        "CompactAction"
    ]
    assert features.instructions("base", ctx_for) == "base\n\nbe brief (ctx of instructor)"
    assert features.tools((), ctx_for) == []
    features.observe("after_agent_settled", ctx_for, None)
    features.transact("message_accepted_transact", ctx_for, None)
    assert asked == ["watcher", "instructor"]


def test_what_overrides_a_hook_is_known_per_feature_class_and_instance() -> None:
    quiet = Quiet()
    seen: list[Any] = []
    quiet.before_inference = lambda ctx: seen.append(ctx)  # type: ignore[method-assign]
    features = FeatureSet([quiet, Watcher()])
    asked, ctx_for = _contexts()
    features.observe("before_inference", ctx_for)
    assert seen == ["ctx of quiet"]
    assert asked == ["quiet"]
    assert features.overrides("on_event")
    assert not features.overrides("before_turn")
    assert features.has_action_hooks  # after_turn


def test_a_misspelled_hook_name_in_the_runtime_still_fails_loudly() -> None:
    features = FeatureSet([Watcher()])
    for call in (
        lambda: features.observe("on_events", lambda f: None),
        lambda: features.actions("after_turns", lambda f: None),
        lambda: features.transact("before_tool_call_transac", lambda f: None),
        lambda: features.overrides("befor_turn"),
    ):
        with pytest.raises(ValueError, match="is not a feature hook"):
            call()
