"""retry_forever: a flaky provider and a flaky or dying store under ``retry_forever=True``
(issue 18): no failure note, no failed turn, no committed effect replayed, a surviving
process ends settled (``R1``–``R3``), and the permission-mode checks (``P1``–``P2``)."""

from __future__ import annotations

from collections.abc import Callable

from agentkeep.chaos.campaigns import DEFAULT_SEEDS, CampaignResult, first_caught
from agentkeep.chaos.retry_mode_mutants import (
    retry_gives_up_after_two_failures,
    retry_replays_the_last_batch,
)
from agentkeep.chaos.retry_modes import retry_forever


def test_retry_forever(seed: int, require_ok: Callable[[CampaignResult], None]) -> None:
    require_ok(retry_forever(seed))


def test_a_retry_that_gives_up_after_two_failures_is_caught() -> None:
    """Mutant: two failures in a row fall back to the give-up path (a failure note, a
    failed turn, work left owed). First caught at seed 1 (docs/chaos.md)."""
    with retry_gives_up_after_two_failures():
        caught = first_caught(retry_forever, range(DEFAULT_SEEDS), {"R1", "R3"})
    assert caught is not None, "the retry checks never noticed a retry that gives up"
    named = {v.invariant for v in caught.violations}
    assert "R1" in named, caught.describe()


def test_a_retry_that_replays_the_committed_batch_is_caught() -> None:
    """Mutant: the load after a retry's backoff hands the loop the last answered batch again
    as pending, so its calls run again although their results are durable (``R2``). First
    caught at seed 1; the replayed batch keeps the run retrying, so that seed waits out its
    idle timeout (about 20 s)."""
    with retry_replays_the_last_batch():
        caught = first_caught(retry_forever, range(DEFAULT_SEEDS), {"R2"})
    assert caught is not None, "the replay check never noticed a committed effect run again"
