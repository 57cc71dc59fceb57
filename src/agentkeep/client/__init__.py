"""Reaching a home's daemon: finding it (:mod:`~agentkeep.client.discovery`) and the
:class:`~agentkeep.mcp.backend.Backend` over its REST API (:class:`HttpBackend`).

The CLI and ``agentkeep mcp`` run one code path per command over a ``Backend``: the
``SystemBackend`` when this process owns the store, the ``HttpBackend`` when a daemon does.
"""

from __future__ import annotations

from agentkeep.client.discovery import Daemon, DaemonLookup, client_token, find_daemon
from agentkeep.client.http import DaemonUnreachableError, HttpBackend

__all__ = [
    "Daemon",
    "DaemonLookup",
    "DaemonUnreachableError",
    "HttpBackend",
    "client_token",
    "find_daemon",
]
