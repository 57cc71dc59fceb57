"""retry_forever: a flaky provider and a flaky or dying store under ``retry_forever=True``:
no failure note, no failed turn, no committed effect replayed, a surviving
process ends settled (``R1``–``R3``), and the permission-mode checks (``P1``–``P2``)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, cast

import agentkeep as ak
from agentkeep.chaos._mutants.retry_modes import (
    retry_gives_up_after_two_failures,
    retry_replays_the_last_batch,
)
from agentkeep.chaos.campaigns import DEFAULT_SEEDS, CampaignResult, first_caught
from agentkeep.chaos.process import DurableState, ProcessReport
from agentkeep.chaos.retry_modes import ModeChecks, ModeJournal, retry_forever
from agentkeep.types.records import SystemRecord


def test_retry_forever(seed: int, require_ok: Callable[[CampaignResult], None]) -> None:
    require_ok(retry_forever(seed))


def test_a_retry_that_gives_up_after_two_failures_is_caught() -> None:
    """Mutant: two failures in a row fall back to the give-up path (a failure note, a
    failed turn, work left owed). Two failures in a row are rare at the suite's failure
    rate, so the search runs past the default seeds: ``R1`` is first named at seed 13
    (docs/chaos.md); seed 8 sometimes shows the mutant earlier through ``R3`` alone."""
    with retry_gives_up_after_two_failures():
        caught = first_caught(retry_forever, range(4 * DEFAULT_SEEDS), {"R1"})
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


def _r1_after(processes: list[tuple[bool, int]]) -> list[list[str]]:
    """``R1`` details named after each process of ``(aborted, failure notes it wrote)``."""
    checks = ModeChecks(cast(Any, SimpleNamespace(offers=[])), ModeJournal(retrying=True))
    notes: list[SystemRecord] = []
    named = []
    for generation, (aborted, written) in enumerate(processes, start=1):
        notes += [SystemRecord(message=ak.system("failed"), reason="failure")] * written
        state = DurableState(
            records=tuple(notes), queued=(), notices=(), pending=(), owed=None, settings=None
        )
        report = ProcessReport(generation=generation, faults=None, aborted=aborted)
        found = checks.after_process(state, report)
        named.append([v.detail for v in found if v.invariant == "R1"])
    return named


def test_r1_excuses_one_note_written_by_the_aborting_process_itself() -> None:
    assert _r1_after([(True, 1), (False, 0)]) == [[], []]
    assert _r1_after([(True, 2)]) == [["2 failure note(s) written while retrying forever"]]


def test_r1_judges_each_process_by_what_it_wrote_so_an_earlier_abort_excuses_nothing() -> None:
    """Two aborting processes that wrote nothing, then a healthy one that gave up: before,
    R1 compared the campaign's notes with its aborts (1 <= 2) and stayed silent (the CI run
    of stop 25, seed 8, named the mutant only through R3)."""
    named = _r1_after([(True, 0), (True, 0), (False, 1)])
    assert named == [[], [], ["1 failure note(s) written while retrying forever"]]
