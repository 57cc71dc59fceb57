"""Loaded by every Python child process a test starts on the PostgreSQL pass (the autouse
fixture ``stores_on_backend`` puts this directory first on ``PYTHONPATH``): stores open in
the schemas the test's process uses for the same state directories (``backend_stores``).

The redirection is installed when the child first imports ``agentkeep`` (right after the
package's own import), not at start-up: importing agentkeep's store (psycopg, msgspec...)
takes a second or two, which a child that never opens a store -- a process driver's
standard-library harness, say -- must not pay, or its start-up alone outruns the short
timeouts its tests give it."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType

_BASE = os.environ.get("AGENTKEEP_TEST_STORES")


class _InstallAfterAgentkeep(importlib.abc.MetaPathFinder):
    """Finds ``agentkeep`` through the other finders and installs the redirection once the
    package's module has run; then leaves ``sys.meta_path``."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "agentkeep":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            import backend_stores

            assert _BASE is not None
            backend_stores.install(_BASE)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if _BASE and os.environ.get("AGENTKEEP_TEST_DATABASE") == "postgres":
    if "agentkeep" in sys.modules:  # pragma: no cover - imported before site ran
        import backend_stores

        backend_stores.install(_BASE)
    else:
        sys.meta_path.insert(0, _InstallAfterAgentkeep())
