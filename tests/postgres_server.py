"""The suite's database backend: SQLite (the default) or a real PostgreSQL server.

A pytest plugin (``tests/conftest.py`` loads it). ``AGENTKEEP_TEST_DATABASE=sqlite|postgres``,
or ``--database=sqlite|postgres`` (which wins), selects the pass:

- ``database_url``: the test's backend. None on the SQLite pass (the store lives in the state
  directory), a fresh schema's URL on the PostgreSQL pass. A test that takes it runs on both.
- ``postgres_url``: a fresh schema's URL on the session's server (``postgres_server``: the
  server's own URL); a test that takes either, directly or through its own fixtures, needs
  PostgreSQL and is skipped on the SQLite pass with that reason.
- ``@pytest.mark.sqlite_only("reason")``: SQLite by nature (the fault-injecting VFS, power-loss
  cuts); skipped on the PostgreSQL pass with its reason, which is required.
- On the PostgreSQL pass every test's stores are on PostgreSQL (the autouse fixture
  ``stores_on_backend``, ``tests/pg_children/backend_stores.py``): ``Store.open`` (so
  ``open_store`` and ``AgentSystem.open`` without a database), the CLI and a daemon
  (``AGENTKEEP_DATABASE``) and a Python script the test starts (``tests/pg_children``'s
  ``sitecustomize``) open a schema of their own per state directory, the same one each time
  that directory is reopened, by any process.
- These fixtures mark their tests ``backend`` (``-m backend``: the tests written for a
  backend, a quick check of one); ``make test`` runs the whole suite on both passes.

The server is ``AGENTKEEP_TEST_POSTGRES_URL`` when that is set (the session neither starts nor
stops it); otherwise the first test that needs one starts a throwaway cluster with
``scripts/postgres_cluster.py`` (initdb into a temporary directory, owned by ``postgres`` when
running as root, 127.0.0.1 on a free port) and the session's end stops it and removes the
directory, whether the tests passed or not. While it runs its URL is exported as
``AGENTKEEP_TEST_POSTGRES_URL``, so processes the tests start can reach it. Each xdist worker
is a session of its own, with its own cluster.

A schema per test: the URL is the server's with ``?schema=NAME`` (``t_`` and 16 hex digits),
the schema created empty before the test and dropped (``CASCADE``) after it; a test that
leaves a connection holding locks in it fails its teardown after ``lock_timeout``.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

REPO = Path(__file__).resolve().parents[1]
BACKENDS = ("sqlite", "postgres")
BACKEND_VARIABLE = "AGENTKEEP_TEST_DATABASE"
URL_VARIABLE = "AGENTKEEP_TEST_POSTGRES_URL"
# How long dropping a test's schema waits for locks a leaked connection still holds.
DROP_LOCK_TIMEOUT = "20s"
PG_PASS = (
    "the PostgreSQL pass: make test (its second pass), make test-postgres, or "
    "AGENTKEEP_TEST_DATABASE=postgres"
)


def cluster_script() -> ModuleType:
    """``scripts/postgres_cluster.py``, the same code ``scripts/postgres-cluster`` runs."""
    spec = importlib.util.spec_from_file_location(
        "postgres_cluster", REPO / "scripts" / "postgres_cluster.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def backend(config: pytest.Config) -> str:
    """The selected backend: ``--database``, else ``AGENTKEEP_TEST_DATABASE``, else sqlite."""
    chosen = config.getoption("agentkeep_database") or os.environ.get(BACKEND_VARIABLE) or "sqlite"
    if chosen not in BACKENDS:
        raise pytest.UsageError(
            f"{BACKEND_VARIABLE}={chosen!r}: the test backend is one of {', '.join(BACKENDS)}"
        )
    return str(chosen)


def on_sqlite() -> bool:
    """True on the SQLite pass: for a test's side check that only SQLite has (``db check``,
    SQLite's integrity check of the file, is refused on PostgreSQL)."""
    return os.environ.get(BACKEND_VARIABLE, "sqlite") == "sqlite"


def with_schema(url: str, schema: str) -> str:
    """``url`` with ``schema=NAME`` in its query (replacing one already there)."""
    parts = urlsplit(url)
    query = [(key, value) for key, value in parse_qsl(parts.query) if key != "schema"]
    return urlunsplit(parts._replace(query=urlencode([*query, ("schema", schema)])))


def without_schema(url: str) -> str:
    """``url`` without its ``schema`` parameter: what libpq itself accepts."""
    parts = urlsplit(url)
    query = [(key, value) for key, value in parse_qsl(parts.query) if key != "schema"]
    return urlunsplit(parts._replace(query=urlencode(query)))


@contextlib.contextmanager
def fresh_schema(server_url: str) -> Iterator[str]:
    """A new empty schema on the server, dropped on exit; yields its URL (``?schema=``)."""
    import psycopg
    from psycopg import sql

    schema = f"t_{uuid.uuid4().hex[:16]}"
    name = sql.Identifier(schema)
    with psycopg.connect(without_schema(server_url), autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(name))
    try:
        yield with_schema(server_url, schema)
    finally:
        with psycopg.connect(without_schema(server_url), autocommit=True) as admin:
            admin.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(DROP_LOCK_TIMEOUT)))
            admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(name))


# -- pytest hooks -----------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--database",
        dest="agentkeep_database",
        choices=BACKENDS,
        default=None,
        help=f"the store backend the suite runs on (default: ${BACKEND_VARIABLE}, else sqlite)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "sqlite_only(reason): SQLite by nature; skipped on the PostgreSQL pass with its reason",
    )
    config.addinivalue_line(
        "markers",
        "backend: uses database_url, postgres_url or postgres_server (added automatically); "
        "`make test-postgres` runs these on PostgreSQL",
    )
    # Processes the tests start (the CLI, a daemon, a child owning a store) see the pass too.
    os.environ[BACKEND_VARIABLE] = backend(config)


def pytest_report_header(config: pytest.Config) -> str:
    chosen = backend(config)
    if chosen == "postgres":
        server = os.environ.get(URL_VARIABLE) or "a throwaway cluster (scripts/postgres_cluster)"
        return f"database backend: postgres on {server}"
    return "database backend: sqlite"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    chosen = backend(config)
    for item in items:
        marker = item.get_closest_marker("sqlite_only")
        if marker is not None:
            reason = marker.kwargs.get("reason") or (marker.args[0] if marker.args else "")
            if not reason:
                raise pytest.UsageError(f"{item.nodeid}: sqlite_only needs a reason")
            if chosen == "postgres":
                item.add_marker(pytest.mark.skip(reason=f"SQLite only: {reason}"))
        # Every fixture a test uses, directly or through others: a test-local fixture built on
        # postgres_server (or postgres_url) needs the server as much as the test taking it.
        names = getattr(item, "fixturenames", ())
        if "postgres_server" in names or "database_url" in names:
            item.add_marker(pytest.mark.backend)
        if "postgres_server" in names and chosen == "sqlite":
            reason = f"needs a PostgreSQL server: runs on {PG_PASS}"
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True, scope="session")
def stores_on_backend(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """On the PostgreSQL pass, every store the session's tests (or processes they start) open
    without naming a database is a schema of its own per state directory on the session's
    server (``tests/pg_children/backend_stores.py``; state directories are per test, so
    their schemas are too); yields the base URL (``AGENTKEEP_DATABASE``). None on the SQLite
    pass. ``backend_schemas_dropped`` drops each test's schemas after it."""
    if backend(request.config) != "postgres":
        yield None
        return
    from tests.pg_children import backend_stores

    server = str(request.getfixturevalue("postgres_server"))
    url = with_schema(server, f"t_{uuid.uuid4().hex[:12]}")
    children = str(REPO / "tests" / "pg_children")
    names = ("AGENTKEEP_DATABASE", "AGENTKEEP_TEST_STORES", "PYTHONPATH")
    saved = {name: os.environ.get(name) for name in names}
    os.environ["AGENTKEEP_DATABASE"] = url
    os.environ["AGENTKEEP_TEST_STORES"] = url
    # Python children (a script owning the store) open the same schemas: its sitecustomize.
    path = saved["PYTHONPATH"]
    os.environ["PYTHONPATH"] = f"{children}{os.pathsep}{path}" if path else children
    replaced = backend_stores.install(url)
    try:
        yield url
    finally:
        for owner, name, original in replaced:
            setattr(owner, name, original)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(autouse=True)
def backend_schemas_dropped(stores_on_backend: str | None) -> Iterator[None]:
    """The schemas a test's state directories got on the PostgreSQL pass (those created
    while it ran: a module's shared fixtures keep theirs), dropped after it."""
    if stores_on_backend is None:
        yield
        return
    import psycopg
    from psycopg import sql

    base = backend_stores_schema(stores_on_backend)
    server = without_schema(stores_on_backend)

    def schemas() -> set[str]:
        with psycopg.connect(server, autocommit=True) as admin:
            rows = admin.execute(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s", (f"{base}%",)
            ).fetchall()
        return {name for (name,) in rows}

    before = schemas()
    yield
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(DROP_LOCK_TIMEOUT)))
        for name in sorted(schemas() - before):
            admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def backend_stores_schema(url: str) -> str:
    """The ``schema`` parameter of ``url``."""
    return dict(parse_qsl(urlsplit(url).query))["schema"]


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The session's PostgreSQL server URL (superuser, database ``postgres``, no schema).

    ``AGENTKEEP_TEST_POSTGRES_URL`` when set; otherwise a cluster started now and stopped, its
    directory removed, at the session's end even when tests failed (and at interpreter exit
    should the session end without tearing down)."""
    given = os.environ.get(URL_VARIABLE)
    if given:
        yield given
        return
    script = cluster_script()
    directory = Path(tempfile.mkdtemp(prefix="agentkeep-pg-"))

    def stop() -> None:
        with contextlib.suppress(script.ClusterError, OSError):
            script.stop(directory)
        shutil.rmtree(directory, ignore_errors=True)

    atexit.register(stop)
    try:
        url = script.start(directory, timeout=60)  # within the first test's 120 s timeout
    except script.ClusterError as error:
        stop()
        atexit.unregister(stop)
        pytest.fail(f"could not start a PostgreSQL cluster: {error}", pytrace=False)
    os.environ[URL_VARIABLE] = url
    try:
        yield url
    finally:
        os.environ.pop(URL_VARIABLE, None)
        stop()
        atexit.unregister(stop)


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A fresh, empty schema on the session's server, for this test alone: the server's URL
    with ``?schema=NAME``; dropped after the test. Skipped on the SQLite pass."""
    with fresh_schema(postgres_server) as url:
        yield url


@pytest.fixture
def database_url(request: pytest.FixtureRequest) -> str | None:
    """The test's store backend: None on the SQLite pass (the state directory's database),
    a fresh schema's URL (as ``postgres_url``) on the PostgreSQL pass."""
    if backend(request.config) == "sqlite":
        return None
    return str(request.getfixturevalue("postgres_url"))
