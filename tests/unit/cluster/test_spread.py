"""The even spread: every worker computes the same shares from the same membership."""

from __future__ import annotations

import pytest

from agentkeep.cluster import CoordinatorSettings, fair_share, plan, preferred_order, shares


@pytest.mark.parametrize("count", [1, 2, 7, 8, 16, 64])
@pytest.mark.parametrize("n", [1, 2, 3, 5, 9])
def test_shares_add_up_and_differ_by_at_most_one(count: int, n: int) -> None:
    workers = [f"w{i}" for i in range(n)]
    dealt = shares(count, workers)
    assert sum(dealt.values()) == count
    assert max(dealt.values()) - min(dealt.values()) <= 1
    # The first in the agreed order get the extra ones.
    assert list(dealt.values()) == sorted(dealt.values(), reverse=True)
    for worker in workers:
        assert fair_share(count, workers, worker) == dealt[worker]


def test_a_worker_that_is_not_a_member_has_no_share() -> None:
    assert fair_share(8, ["a", "b"], "c") == 0
    assert shares(8, []) == {}


def test_each_worker_starts_at_its_own_slice() -> None:
    workers = ["a", "b", "c", "d"]
    starts = [preferred_order(16, workers, w)[0] for w in workers]
    assert starts == [0, 4, 8, 12]
    for worker in workers:
        assert sorted(preferred_order(16, workers, worker)) == list(range(16))


def test_settings_refuse_a_lease_shorter_than_three_ticks() -> None:
    with pytest.raises(ValueError, match="three ticks"):
        CoordinatorSettings(count=4, lease_ms=500, tick_ms=250)
    with pytest.raises(ValueError, match="at least one partition"):
        CoordinatorSettings(count=0)
    assert CoordinatorSettings(count=4, lease_ms=9000).heartbeat_every_ms == 3000


def test_a_worker_over_its_share_gives_up_its_highest_held_partitions() -> None:
    step = plan(8, ["a", "b"], "a", held=range(8), opening=(), releasing=(), locked=range(8))
    assert (step.share, step.release, step.open) == (4, [7, 6, 5, 4], [])
    # partitions still opening count as its own: it gives up only held ones
    step = plan(8, ["a", "b"], "a", held=[0, 1, 2], opening=[3, 4], releasing=(), locked=[0])
    assert (step.release, step.open) == ([2], [])


def test_a_worker_under_its_share_opens_only_free_partitions_from_its_slice() -> None:
    # b's slice starts at 4; 4 and 5 are locked (another worker's, or being handed off),
    # 6 is being released by b itself.
    step = plan(8, ["a", "b"], "b", held=[], opening=[7], releasing=[6], locked=[4, 5])
    assert (step.share, step.release, step.open) == (4, [], [0, 1, 2])
    # nothing free: nothing to do until a hand-off frees one
    step = plan(8, ["a", "b"], "b", held=[], opening=[], releasing=[], locked=range(8))
    assert (step.release, step.open) == ([], [])
    # not a member (yet): no share
    assert plan(8, ["a"], "c", held=[], opening=[], releasing=[], locked=[]).open == []
