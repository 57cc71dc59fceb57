"""The store on PostgreSQL (psycopg 3): the same statements, writer and guarantees as on
SQLite, selected by a ``postgresql://`` URL (``Store.open(home, database=url)``).

- :mod:`.dialect`: our statements in PostgreSQL's spelling;
- :mod:`.connection`: the URL (``?schema=``), connections, the executor's connection shape;
- :mod:`.ownership`: the session-level advisory lock and who holds it;
- :mod:`.session`: the owner's session, reconnecting only with the lock taken again;
- :mod:`.schema`: the keyed migrations in PostgreSQL's text;
- :mod:`.writer`: the writer actor (group commit, an unknown COMMIT outcome resolved);
- :mod:`.readers`: snapshots, and reading a store another process owns;
- :mod:`.notifications`: ledger wake-ups between processes (a partition's ``NOTIFY`` on
  commit, one ``LISTEN`` session per process);
- :mod:`.store`: opening one.

docs/postgres.md describes what it creates on the server and how ownership works.
"""

from agentkeep.persistence.postgres.connection import (
    DEFAULT_SCHEMA,
    PostgresTarget,
    is_postgres_url,
    parse_url,
)
from agentkeep.persistence.postgres.dialect import POSTGRES, PostgresDialect
from agentkeep.persistence.postgres.readers import PostgresReadOnlyStore
from agentkeep.persistence.postgres.store import PostgresStore, open_postgres_store

__all__ = [
    "DEFAULT_SCHEMA",
    "POSTGRES",
    "PostgresDialect",
    "PostgresReadOnlyStore",
    "PostgresStore",
    "PostgresTarget",
    "is_postgres_url",
    "open_postgres_store",
    "parse_url",
]
