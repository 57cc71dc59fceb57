"""extensions: modules with keyed migrations (one upgrade), notices at both boundaries,
``prepare_inference`` compactions, history KV and embedder transactions through seeded
crashes (``E1``–``E4``, docs/chaos.md), and a mutant of each caught."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager

import pytest

from agentkeep.chaos import SUITES
from agentkeep.chaos._mutants.extensions import (
    history_kv_kept_across_compaction,
    inference_boundary_asked_again_after_a_restart,
    migration_recorded_before_it_ran,
    send_published_before_commit,
)
from agentkeep.chaos.campaigns import CampaignResult, first_caught
from agentkeep.chaos.extensions import extensions


def test_extensions(seed: int, require_ok: Callable[[CampaignResult], None]) -> None:
    result = extensions(seed)
    require_ok(result)
    assert result.counts["processes"] >= 3  # two or more crashing processes, a healthy last
    assert result.counts["migrations"] == 5  # every key of the upgraded release, once


def test_the_suite_is_registered() -> None:
    assert SUITES["extensions"] is extensions


def test_the_seeds_check_every_property() -> None:
    """Over seeds 0-4 each check has material: crashes, compactions, notices of each
    kind, history KV keys, transactions committed and rolled back."""
    totals: Counter[str] = Counter()
    for seed in range(5):
        result = extensions(seed)
        assert result.ok, result.describe()
        totals.update(result.counts)
    for what in (
        "crashes",
        "compactions",
        "message notices",
        "inference notices",
        "injected notices",
        "history kv keys",
        "tool history kv keys",
        "transactions committed",
        "transactions rolled back",
    ):
        assert totals[what] >= 1, (what, totals)


# (mutant, the check that must name it, seeds searched). First catching seeds on
# 2026-12-05: history KV 0; migrations 7 (9 of 0-39: the crash must fall between the two
# transactions of a key); the send 0; the inference boundary 0 (12 of 0-79; an earlier run
# 11: a restart must fall between a stage's transaction and its response's, timing moves it).
MUTANTS: list[tuple[Callable[[], AbstractContextManager[None]], str, int]] = [
    (history_kv_kept_across_compaction, "E3", 15),
    (migration_recorded_before_it_ran, "E1", 40),
    (send_published_before_commit, "E4", 15),
    (inference_boundary_asked_again_after_a_restart, "E2", 80),
]


@pytest.mark.parametrize(
    ("mutant", "check", "seeds"), MUTANTS, ids=[m[0].__name__ for m in MUTANTS]
)
def test_the_checks_catch_the_mutant(
    mutant: Callable[[], AbstractContextManager[None]], check: str, seeds: int
) -> None:
    with mutant():
        caught = first_caught(extensions, range(seeds), {check})
    assert caught is not None, f"{check} never caught {mutant.__name__} in {seeds} seeds"
