"""Seed 001's transactional tools under crashes: ``X1`` and the mutant it must catch.

The chaos world's fragile tool is ``transactional`` and writes into its call store; the write
commits in the transaction that claims its result (which erases it), or not at all. So no
pending call may ever hold it durably (``X1``, :mod:`agentkeep.chaos.checker`). The mutant
:func:`~agentkeep.chaos.mutants.transactional_writes_outside_the_transaction` runs the tool's
writes outside that transaction: a crash between the two leaves them behind.
"""

from __future__ import annotations

import pytest

from agentkeep.chaos.campaigns import DEFAULT_SEEDS, SUITES, first_caught
from agentkeep.chaos.invariants import INVARIANTS
from agentkeep.chaos.mutants import transactional_writes_outside_the_transaction


# The first catching seeds: crash_recovery 0, queues 8 (interruption only at 18).
@pytest.mark.parametrize("suite", ["crash_recovery", "queues"])
def test_the_suites_catch_transactional_writes_outside_the_transaction(suite: str) -> None:
    with transactional_writes_outside_the_transaction():
        caught = first_caught(SUITES[suite], range(DEFAULT_SEEDS), {"X1"})
    assert caught is not None, f"{suite} never caught the mutant in {DEFAULT_SEEDS} seeds"
    named = [v.describe() for v in caught.violations if v.invariant == "X1"]
    assert named[0].startswith(f"X1 ({INVARIANTS['X1']})"), named
    assert "holds its transactional tool's write" in named[0], named


def test_the_mutant_is_undone_when_it_leaves() -> None:
    with transactional_writes_outside_the_transaction():
        pass
    # The seed the mutant is caught at first, now clean.
    assert SUITES["crash_recovery"](0).ok
