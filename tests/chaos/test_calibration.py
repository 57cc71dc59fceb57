"""The in-process suites draw their store fault points over a measured healthy run
(:mod:`agentkeep.chaos.calibration`): the fault lands inside the run, at its beginning, middle
and end, and the calibration fails loudly when the store's cost per step drifts."""

from __future__ import annotations

import pytest

from agentkeep.chaos import calibration
from agentkeep.chaos.campaigns import SUITES

CALIBRATED = sorted(calibration.HEALTHY_OPERATIONS)
SAMPLE = range(6)


def test_every_suite_with_store_faults_is_calibrated() -> None:
    """A suite drawing fault points from the calibration must have a healthy length."""
    assert set(CALIBRATED) <= set(SUITES)
    for suite in CALIBRATED:
        assert calibration.reach(suite) >= calibration.HEALTHY_OPERATIONS[suite]


@pytest.mark.parametrize("suite", [s for s in CALIBRATED if s not in calibration.NOISY])
def test_healthy_run_length_matches_the_calibration(suite: str) -> None:
    """The longest faulted process of a healthy run is still about as long as the constant
    the suite draws its fault points over: a drift past DRIFT either leaves the end of the
    work unreached or lands most faults after the work is done."""
    measured = calibration.healthy_operations(SUITES[suite], calibration.CALIBRATION_SEEDS)
    assumed = calibration.HEALTHY_OPERATIONS[suite]
    drift = abs(measured - assumed) / assumed
    assert drift <= calibration.DRIFT, (
        f"a healthy {suite} run now takes {measured} store operations in its longest faulted "
        f"process, {drift:.0%} off the {assumed} its fault points are drawn over: set "
        f'HEALTHY_OPERATIONS["{suite}"] = {measured} in agentkeep/chaos/calibration.py'
    )


@pytest.mark.parametrize("suite", CALIBRATED)
def test_fault_points_land_inside_the_run(suite: str) -> None:
    """Over a fixed sample of seeds, a fault fires (the process was still working at its
    point) in at least half the seeds (a point drawn up to the median healthy length misses
    the shorter processes: about 0.6-0.85 of faulted processes fire), and the fault points
    spread from the beginning to the end of a healthy run."""
    results = [SUITES[suite](seed) for seed in SAMPLE]
    fired = [any(calibration.hits(result)) for result in results if calibration.hits(result)]
    assert fired, f"{suite}: no seed of {list(SAMPLE)} carried a fault plan"
    assert 2 * sum(fired) >= len(fired), (
        f"{suite}: a fault fired in only {sum(fired)} of {len(fired)} seeds: the processes "
        f"finished their work before their fault points"
    )
    points = sorted(r.faults.at for res in results for r in res.reports if r.faults is not None)
    length = calibration.HEALTHY_OPERATIONS[suite]
    assert points[0] <= length / 3, f"{suite}: no fault point early in the run: {points}"
    assert points[-1] >= 2 * length / 3, f"{suite}: no fault point late in the run: {points}"
