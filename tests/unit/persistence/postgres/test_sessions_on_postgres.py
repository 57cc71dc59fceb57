"""The sessions' suites (start, list and archive, the toolbox, the written model) run again
with every system's store on PostgreSQL."""

from __future__ import annotations

import pytest
from tests.unit.persistence.postgres.reuse import fixtures_of, reused

pytestmark = pytest.mark.usefixtures("systems_on_postgres")

globals().update(fixtures_of("sessions/conftest.py"))
for _suite in ("test_start", "test_list_archive", "test_toolbox", "test_written_model"):
    globals().update(reused(f"sessions/{_suite}.py"))
