"""``agentkeep workers``: the worker processes serving a PostgreSQL store, and their partitions.

Reads the membership (``agentkeep_workers``) and the partition locks on a read-only session:
who is alive (connected and heartbeating within its lease), which partitions each runs and
since when, and which process holds each partition's lock. Needs ``--database`` (here or
before the command) naming a PostgreSQL store; works while the workers run (it takes no lock).
"""

from __future__ import annotations

import datetime
from typing import Any

import click

from agentkeep.cli.context import CliState, pass_state
from agentkeep.cli.output import EXIT_BAD_INPUT, EXIT_FAILURE, CliError
from agentkeep.persistence.opening import DATABASE_ENV
from agentkeep.persistence.postgres.connection import is_postgres_url


def _iso(ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _seconds(ms: int) -> str:
    return f"{ms / 1000:.1f}s"


@click.command()
@click.option(
    "--database",
    default=None,
    help=f"The store's postgresql://… URL (default: agentkeep --database, else ${DATABASE_ENV}).",
)
@pass_state
def workers(state: CliState, database: str | None) -> None:
    """List the worker processes serving a PostgreSQL store: alive or not, the partitions
    each runs and since when, and who holds each partition's lock."""
    url = database or state.home.database
    if not is_postgres_url(url):
        raise CliError(
            "`agentkeep workers` lists the workers of a PostgreSQL store.",
            code="not_postgres",
            hint="Give --database postgresql://…?schema=NAME (or set "
            f"{DATABASE_ENV}); docs/scale-out.md.",
            exit_code=EXIT_BAD_INPUT,
        )
    assert url is not None
    import psycopg  # only here: the import takes a while, and nothing else needs it

    from agentkeep.cluster.listing import read_membership

    try:
        found = read_membership(url)
    except psycopg.OperationalError as error:
        raise CliError(
            f"Could not reach the store's server: {str(error).strip()}",
            code="store_unavailable",
            hint="Check the URL and that the server is up.",
            exit_code=EXIT_FAILURE,
        ) from error
    value = {
        "store": found.store,
        "workers": [
            {
                "token": worker.token,
                "pid": worker.pid,
                "host": worker.host,
                "address": worker.address,
                "live": worker.live,
                "started": _iso(worker.started_ms),
                "heartbeatAgeMs": worker.heartbeat_age_ms,
                "leaseMs": worker.lease_ms,
                "partitions": [
                    {"partition": index, "since": _iso(since)}
                    for index, since in worker.partitions.items()
                ],
            }
            for worker in found.workers
        ],
        "locks": [
            {"partition": index, "worker": token or None} for index, token in found.locks.items()
        ],
    }
    state.output.result(value, _render)


def _render(value: dict[str, Any]) -> str:
    lines = [f"store {value['store']}"]
    if not value["workers"]:
        lines.append("no workers")
    for worker in value["workers"]:
        status = "live" if worker["live"] else "DEAD (lease expired or session gone)"
        where = f" at {worker['address']}" if worker["address"] else ""
        lines.append(
            f"{worker['token']}  pid {worker['pid']} on {worker['host']}{where}  {status}, "
            f"heartbeat {_seconds(worker['heartbeatAgeMs'])} ago "
            f"(lease {_seconds(worker['leaseMs'])}), since {worker['started']}"
        )
        if not worker["partitions"]:
            lines.append("    no partitions")
        for part in worker["partitions"]:
            lines.append(f"    partition {part['partition']:>4}  since {part['since']}")
    others = [lock["partition"] for lock in value["locks"] if lock["worker"] is None]
    if others:
        lines.append(f"partitions locked by a process that is not a member: {others}")
    return "\n".join(lines)
