"""Chaos suites: seeds from ``CHAOS_SEEDS`` / ``CHAOS_SEED``, quiet logs, readable failures."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import pytest
import structlog

from agentkeep.chaos import CampaignResult, seeds_from_env


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "seed" in metafunc.fixturenames:
        metafunc.parametrize("seed", seeds_from_env())


@pytest.fixture(autouse=True)
def _quiet_logs() -> Iterator[None]:
    """The store logs every injected fault; chaos runs inject thousands."""
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    try:
        yield
    finally:
        structlog.configure(**saved)


@pytest.fixture
def require_ok() -> Callable[[CampaignResult], None]:
    """Fail with the seed, every violation, the processes and the replay command."""

    def check(result: CampaignResult) -> None:
        if not result.ok:
            pytest.fail(result.describe(), pytrace=False)

    return check
