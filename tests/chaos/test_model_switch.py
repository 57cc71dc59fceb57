"""model_switch: an incompatible codex → claude switch (the provider's view restarts, the old
conversation is archived), crashed around."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agentkeep.actors import plan_hooks
from agentkeep.chaos.campaigns import CampaignResult, first_caught, model_switch
from agentkeep.persistence.archive import ArchiveStatements


def test_model_switch(seed: int, require_ok: Callable[[CampaignResult], None]) -> None:
    require_ok(model_switch(seed))


def test_checker_catches_old_history_under_the_new_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Mutant: the compatibility rule is skipped, so the codex history is kept under the
    claude model (invariant I22)."""

    def never(self: Any, previous: Any, current: Any) -> bool:
        return False

    monkeypatch.setattr(plan_hooks.ConsumptionPolicy, "needs_reset", never)
    caught = first_caught(model_switch, range(20), {15})
    assert caught is not None, "the checker never noticed old history under the new model"


def test_checker_catches_a_switch_that_deletes_the_old_history(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Mutant: the reset erases the old conversation instead of archiving it (a
    typo'd --model would delete the history; invariant I23)."""

    def delete_instead(self: Any, agent_id: str, through: Any, **_: Any) -> None:
        return None  # archive nothing: the reset's rewrite then deletes the records

    monkeypatch.setattr(ArchiveStatements, "add_epoch", delete_instead)
    caught = first_caught(model_switch, range(3), {26})
    assert caught is not None, "the checker never noticed the deleted history"
