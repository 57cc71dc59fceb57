"""The registry's suites (versioned definitions, the tables' statements and triggers) run
again with every system's store on PostgreSQL."""

from __future__ import annotations

import pytest
from tests.unit.persistence.postgres.reuse import fixtures_of, reused

pytestmark = pytest.mark.usefixtures("systems_on_postgres")

globals().update(fixtures_of("registry/conftest.py"))
globals().update(reused("registry/test_service.py"))
globals().update(reused("registry/test_registry_store.py"))
