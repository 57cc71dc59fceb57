"""permission_modes: messages changing the permission mode under crashes: each
tool execution and its ``before_tool_call`` run under the mode their response began under
(``P1``), and the durable mode is the last consumed message's across every reopen (``P2``)."""

from __future__ import annotations

from collections.abc import Callable

from agentkeep.chaos._mutants.retry_modes import mode_changes_at_acceptance
from agentkeep.chaos.campaigns import DEFAULT_SEEDS, CampaignResult, first_caught
from agentkeep.chaos.retry_modes import permission_modes


def test_permission_modes(seed: int, require_ok: Callable[[CampaignResult], None]) -> None:
    require_ok(permission_modes(seed))


def test_a_mode_that_changes_at_acceptance_is_caught() -> None:
    """Mutant: accepting a message that sets a mode writes it to the durable settings at
    once, so a crash leaves a mode no consumed message set, and a tool of the next batch
    runs under a queued message's mode. First caught at seed 2 (docs/chaos.md)."""
    with mode_changes_at_acceptance():
        caught = first_caught(permission_modes, range(DEFAULT_SEEDS), {"P1", "P2"})
    assert caught is not None, "the mode checks never noticed a mode changed at acceptance"
    assert {"P1", "P2"} & {v.invariant for v in caught.violations}, caught.describe()
