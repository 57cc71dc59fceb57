"""Tool result commits under crashes (invariant I18): ``X1``, ``X2`` and the mutants they catch.

The chaos world's fragile tool is ``transactional`` and writes into its call store; the write
commits in the transaction that claims its result (which erases it), or not at all, so no
pending call may ever hold it durably (``X1``). The durable tool saves its result with
``ctx.commit`` before returning; once that commit won, the call never runs again, not even
after a crash (``X2``). Both are judged by :mod:`agentkeep.chaos.checker` after every process.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

import pytest

from agentkeep.chaos._mutants.runtime import (
    committed_results_run_again,
    transactional_writes_outside_the_transaction,
)
from agentkeep.chaos.campaigns import DEFAULT_SEEDS, SUITES, first_caught
from agentkeep.chaos.invariants import INVARIANTS

Mutant = Callable[[], AbstractContextManager[None]]

# (mutant, check, words of the violation, suites that catch it within DEFAULT_SEEDS).
# First catching seeds: X1 crash_recovery 0, queues 8 (interruption only at 18);
# X2 crash_recovery 0, queues 2.
CASES: list[tuple[Mutant, str, str, tuple[str, ...]]] = [
    (
        transactional_writes_outside_the_transaction,
        "X1",
        "holds its transactional tool's write",
        ("crash_recovery", "queues"),
    ),
    (committed_results_run_again, "X2", "then ran it again", ("crash_recovery", "queues")),
]


@pytest.mark.parametrize(
    ("mutant", "check", "words", "suite"),
    [
        pytest.param(mutant, check, words, suite, id=f"{mutant.__name__}-{suite}")
        for mutant, check, words, suites in CASES
        for suite in suites
    ],
)
def test_each_tool_commit_mutant_is_caught(
    mutant: Mutant, check: str, words: str, suite: str
) -> None:
    with mutant():
        caught = first_caught(SUITES[suite], range(DEFAULT_SEEDS), {check})
    assert caught is not None, f"{suite} never caught {mutant.__name__} in {DEFAULT_SEEDS} seeds"
    named = [v.describe() for v in caught.violations if v.invariant == check]
    assert named[0].startswith(f"{check} ({INVARIANTS[check]})"), named
    assert words in named[0], named


@pytest.mark.parametrize("mutant", [case[0] for case in CASES])
def test_each_tool_commit_mutant_is_undone_when_it_leaves(mutant: Mutant) -> None:
    with mutant():
        pass
    # Seed 0 catches both mutants in crash_recovery: clean again once they left.
    assert SUITES["crash_recovery"](0).ok
