"""model_switch: an incompatible codex → claude switch (the history resets), crashed around
(spec §6.2)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agentkeep.actors import services
from agentkeep.chaos.campaigns import CampaignResult, first_caught, model_switch


def test_model_switch(seed: int, require_ok: Callable[[CampaignResult], None]) -> None:
    require_ok(model_switch(seed))


def test_checker_catches_old_history_under_the_new_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Mutant: the compatibility rule is skipped, so the codex history is kept under the
    claude model (§7.15)."""

    def never(self: Any, previous: Any, current: Any) -> bool:
        return False

    monkeypatch.setattr(services._ConsumptionPolicy, "needs_reset", never)
    caught = first_caught(model_switch, range(20), {15})
    assert caught is not None, "the checker never noticed old history under the new model"
