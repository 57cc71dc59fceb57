"""Where a worker serves a session's SSE stream (used by :mod:`.cluster_front`).

A stream of durable events only (``ephemeral=false``) reads the ledger from the store, so
any worker serves it (the owner's commits wake it through the store's notifications); one
with live text deltas (the default) needs the owner, where the deltas exist, in memory.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs

__all__ = ["stream_session", "wants_ephemerals"]

_STREAM = re.compile(r"^/v1/sessions/([^/]+)/events/stream$")


def stream_session(method: str, path: str) -> str | None:
    """The session id of a ``GET``/``HEAD`` of its event stream, else None."""
    if method not in ("GET", "HEAD"):
        return None
    found = _STREAM.match(path)
    return None if found is None else found.group(1)


def wants_ephemerals(query: bytes) -> bool:
    """Whether a stream's query asks for live text deltas (``ephemeral`` absent or true, as
    the stream reads it; a value it refuses goes to the owner, which refuses it)."""
    values = parse_qs(query.decode("latin-1")).get("ephemeral")
    return values is None or len(values) != 1 or values[0].lower() not in ("false", "0")
