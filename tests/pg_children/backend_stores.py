"""The PostgreSQL pass's stores, one schema per state directory (``tests/postgres_server.py``
installs this in the test's process, ``sitecustomize`` here in every Python child a test
starts, so both agree on where a state directory's store is).

``AGENTKEEP_TEST_STORES`` (and ``AGENTKEEP_DATABASE``, unless a test sets its own) names
the base schema. Every store opened on that URL (by the CLI and the daemon, which read it,
or by ``Store.open(home)`` / ``AgentSystem.open(home)`` without a database, and
``ReadOnlyStore.open(home)``, redirected to it here) is opened in ``BASE_<hash of the state
directory>`` instead: the same schema each time a directory is reopened, by any process, and
a different one for each directory. Any other URL (a test's own ``postgres_url``) is left
alone."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit


def schema_of(url: str) -> str | None:
    return dict(parse_qsl(urlsplit(url).query)).get("schema")


def with_schema(url: str, schema: str) -> str:
    parts = urlsplit(url)
    query = [(key, value) for key, value in parse_qsl(parts.query) if key != "schema"]
    return urlunsplit(parts._replace(query=urlencode([*query, ("schema", schema)])))


def home_schema(base: str, directory: Any) -> str:
    """``base`` and a digest of the state directory's absolute path."""
    resolved = str(Path(str(directory)).expanduser().resolve())
    return f"{base}_{hashlib.sha1(resolved.encode()).hexdigest()[:10]}"


def install(base_url: str) -> list[tuple[Any, str, Any]]:
    """Redirect the openings (see the module); returns ``(owner, name, original)`` for each
    attribute replaced, so a caller can put them back."""
    from agentkeep.persistence import postgres
    from agentkeep.persistence.opening import open_store
    from agentkeep.persistence.readonly import ReadOnlyStore
    from agentkeep.persistence.store import Store

    base = schema_of(base_url)
    assert base, base_url

    def retarget(url: str, directory: Any) -> str:
        return with_schema(url, home_schema(base, directory)) if schema_of(url) == base else url

    real_open = postgres.open_postgres_store
    real_reader = postgres.PostgresReadOnlyStore.open.__func__  # type: ignore[attr-defined]

    def open_postgres_store(url: str, directory: Path, **options: Any) -> Any:
        return real_open(retarget(url, directory), directory, **options)

    def open_reader(cls: Any, url: str, directory: Path, *args: Any, **options: Any) -> Any:
        return real_reader(cls, retarget(url, directory), directory, *args, **options)

    def store_open(cls: type[Store], home: Any = None, **options: Any) -> Store:
        if options.get("vfs") is not None or options.get("database_path") is not None:
            raise AssertionError(
                "a SQLite store (vfs or database_path) opened on the PostgreSQL pass: "
                "mark the test sqlite_only with the reason"
            )
        return open_store(home, database=base_url, **options)

    def read_only(cls: Any, home: Any = None, **options: Any) -> Any:
        from agentkeep.persistence.store import resolve_home

        # A test's own list (SQLite's texts) is checked by (version, name), as on SQLite.
        return postgres.PostgresReadOnlyStore.open(base_url, resolve_home(home), **options)

    replaced = [
        (ReadOnlyStore, "open", ReadOnlyStore.__dict__["open"]),
        (postgres, "open_postgres_store", real_open),
        (postgres.PostgresReadOnlyStore, "open", classmethod(real_reader)),
        (Store, "open", Store.__dict__["open"]),
    ]
    postgres.open_postgres_store = open_postgres_store  # type: ignore[assignment]
    postgres.PostgresReadOnlyStore.open = classmethod(open_reader)  # type: ignore[assignment,method-assign]
    ReadOnlyStore.open = classmethod(read_only)  # type: ignore[assignment,method-assign]
    Store.open = classmethod(store_open)  # type: ignore[assignment,method-assign]
    return replaced
