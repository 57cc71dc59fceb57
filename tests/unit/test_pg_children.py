"""A Python child a test starts opens its stores where the test's own process does (on the
PostgreSQL pass: ``tests/pg_children``'s ``sitecustomize``), and a child that never imports
agentkeep pays nothing for that: the redirection is installed when agentkeep is first
imported, not at the child's start-up (importing the store takes a second or two, which
outran the short timeouts of the process driver's standard-library harness)."""

from __future__ import annotations

import subprocess
import sys

from agentkeep.persistence.store import Store


def _child(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_child_that_never_imports_agentkeep_loads_none_of_it() -> None:
    loaded = _child(
        "import sys; print(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('agentkeep', 'psycopg', 'apsw', 'backend_stores')))"
    )
    assert loaded == "[]"


def test_a_child_importing_agentkeep_opens_stores_as_the_test_does() -> None:
    # The redirection on the PostgreSQL pass, Store's own opening on the SQLite pass.
    opening = "Store.__dict__['open'].__func__.__qualname__"
    child = _child(f"from agentkeep.persistence.store import Store; print({opening})")
    assert child == Store.__dict__["open"].__func__.__qualname__
