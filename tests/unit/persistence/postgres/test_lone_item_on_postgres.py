"""A group's lone item on PostgreSQL (no savepoint; its failure rolls back the whole
transaction, no COMMIT): the SQLite suite again, on this directory's PostgreSQL store."""

from __future__ import annotations

import pytest
from tests.unit.persistence.postgres.reuse import reused

pytestmark = pytest.mark.usefixtures("stores_on_postgres")

globals().update(reused("persistence/test_lone_item.py"))
