"""A clean actor world per test: nothing running before, everything stopped after."""

from __future__ import annotations

from collections.abc import Iterator

import pykka
import pytest


@pytest.fixture(autouse=True)
def clean_actor_world() -> Iterator[None]:
    assert pykka.ActorRegistry.get_all() == [], "a previous test left actors running"
    yield
    # Stop what a failing test left behind; a passing test has stopped everything itself.
    pykka.ActorRegistry.stop_all(timeout=30)
