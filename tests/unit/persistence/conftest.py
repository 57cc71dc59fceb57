"""The store most persistence tests start from: a fresh state directory holding one agent,
``"a"`` (a test file that wants another start defines its own ``store``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentkeep.persistence import Store
from agentkeep.types.records import AgentRow


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path) as opened:
        opened.transact(lambda tx: tx.agents.create(AgentRow(id="a", config={})))
        yield opened
