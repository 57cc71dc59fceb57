"""Chaos suites: seeds from ``CHAOS_SEEDS`` / ``CHAOS_SEED``, quiet logs, readable failures.

On the PostgreSQL pass (``AGENTKEEP_TEST_DATABASE=postgres``) every campaign runs on the
session's server the way ``CHAOS_DATABASE`` runs it (:mod:`agentkeep.chaos.backend`): each seed
on a fresh schema of its own, the URL handed to the processes a campaign starts. So a campaign
judges the schema its processes wrote, not a per-directory schema of the suite's own stores
(a process campaign copies its state directory to judge a crash image: on a server there is
no file to copy). Suites that are SQLite by nature are marked ``sqlite_only``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from tests.postgres_server import backend

from agentkeep.chaos import CampaignResult, seeds_from_env
from agentkeep.chaos.backend import DATABASE_ENV, use_database
from agentkeep.chaos.quiet import quiet_logs


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "seed" in metafunc.fixturenames:
        metafunc.parametrize("seed", seeds_from_env())


@pytest.fixture(autouse=True)
def _quiet_logs() -> Iterator[None]:
    """The store logs every injected fault; chaos runs inject thousands."""
    with quiet_logs():
        yield


@pytest.fixture(autouse=True)
def _campaigns_on_the_backend(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """On the PostgreSQL pass, the campaigns' server is the session's (see the module)."""
    if backend(request.config) != "postgres":
        yield
        return
    server = str(request.getfixturevalue("postgres_server"))
    monkeypatch.setenv(DATABASE_ENV, server)  # process pools and children read it
    with use_database(server):
        yield


@pytest.fixture
def require_ok() -> Callable[[CampaignResult], None]:
    """Fail with the seed, every violation, the processes and the replay command."""

    def check(result: CampaignResult) -> None:
        if not result.ok:
            pytest.fail(result.describe(), pytrace=False)

    return check
