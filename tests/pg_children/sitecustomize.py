"""Loaded by every Python child process a test starts on the PostgreSQL pass (the autouse
fixture ``stores_on_backend`` puts this directory first on ``PYTHONPATH``): stores open in
the schemas the test's process uses for the same state directories (``backend_stores``)."""

from __future__ import annotations

import os

_BASE = os.environ.get("AGENTKEEP_TEST_STORES")
if _BASE and os.environ.get("AGENTKEEP_TEST_DATABASE") == "postgres":
    import backend_stores

    backend_stores.install(_BASE)
