"""crash_recovery: the process dies at a random store operation, again and again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from agentkeep.actors import tool_runner
from agentkeep.chaos.campaigns import CampaignResult, crash_recovery, first_caught
from agentkeep.loop.effects import ToolRun


def test_crash_recovery(seed: int, require_ok: Callable[[CampaignResult], None]) -> None:
    require_ok(crash_recovery(seed))


def test_checker_catches_a_fragile_tool_rerun_on_resume(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutant: the tool runner forgets that a resumed call may already have run, so a
    non-durable tool runs again after a restart (invariant I17)."""
    bind = tool_runner.ToolRunner.bind

    def forgetful(self: Any, run: ToolRun, *args: Any) -> Any:
        return bind(self, msgspec.structs.replace(run, resumed=False), *args)

    monkeypatch.setattr(tool_runner.ToolRunner, "bind", forgetful)
    caught = first_caught(crash_recovery, range(60), {12})
    assert caught is not None, "the checker never noticed a fragile tool running twice"
