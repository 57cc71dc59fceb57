"""A misspelled hook fails when the feature is defined, naming the hook it resembles
before, ``befor_turn`` was silently never called."""

from __future__ import annotations

import pytest

import agentkeep as ak
from agentkeep.features import HOOKS, FeatureSet


@pytest.mark.parametrize(
    ("misspelled", "meant"),
    [
        ("befor_turn", "before_turn"),
        ("after_turns", "after_turn"),
        ("on_events", "on_event"),
        ("before_tool_cal", "before_tool_call"),
        ("message_accepted_transcat", "message_accepted_transact"),
        ("after_agent_setled", "after_agent_settled"),
        ("tool", "tools"),
    ],
)
def test_a_misspelled_hook_fails_at_class_creation(misspelled: str, meant: str) -> None:
    def hook(self: ak.Feature, ctx: ak.HookContext) -> None:
        return None

    with pytest.raises(ak.FeatureDefinitionError) as raised:
        type("Audit", (ak.Feature,), {"name": "audit", misspelled: hook})
    message = str(raised.value)
    assert f'"{misspelled}"' in message
    assert f'did you mean "{meant}"' in message
    assert "Audit" in message


def test_a_misspelled_hook_in_a_class_statement_fails() -> None:
    with pytest.raises(ak.FeatureDefinitionError, match='did you mean "before_turn"'):

        class Greeter(ak.Feature):
            name = "greeter"

            def befor_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> None:
                return None


def test_a_subclass_of_a_feature_is_checked_too() -> None:
    class Base(ak.Feature):
        name = "base"

        def after_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> None:
            return None

    with pytest.raises(ak.FeatureDefinitionError, match='did you mean "after_inference"'):
        type("Derived", (Base,), {"after_inferense": lambda self, ctx, info: None})


def test_helpers_and_real_hooks_are_accepted() -> None:
    class Notes(ak.Feature):
        name = "notes"
        label = "not callable"

        def before_turn(self, ctx: ak.HookContext, turn: ak.TurnInfo) -> None:
            return None

        def after_note(self) -> None:  # shares a prefix with a hook, but is no misspelling
            return None

        def tool_started(self) -> None:
            return None

        def _befor_turn(self) -> None:  # a private helper is never checked
            return None

    assert FeatureSet([Notes()]).overrides("before_turn")


def test_the_runtime_refuses_a_hook_name_that_does_not_exist() -> None:
    features = FeatureSet([])
    assert "before_turn" in HOOKS
    with pytest.raises(ValueError, match="befor_turn"):
        features.observe("befor_turn", lambda feature: None)
    with pytest.raises(ValueError, match="befor_turn"):
        features.overrides("befor_turn")
