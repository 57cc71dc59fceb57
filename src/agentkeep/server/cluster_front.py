"""The front of a worker (``agentkeep serve --partitions``): any request, to the right system.

A worker runs one :class:`~agentkeep.AgentSystem` per partition it owns, each with the
ordinary app of :func:`~agentkeep.server.app.create_app` over it (so every route is the
daemon's own). :class:`ClusterFront` is the ASGI app in front of them; it answers
``/healthz`` itself (with the coordinator's health) and sends every other request on:

- a write for a session (``POST``/``PUT``/``PATCH``/``DELETE`` under ``/v1/sessions/{id}``)
  and a session's SSE stream with live text deltas (they exist only in the owner's memory)
  go to the owner of the session's partition (:func:`~agentkeep.partitions.partition_of`):
  the local system when this worker runs it, else **forwarded** over HTTP to the worker
  that does (its address from ``agentkeep_workers``); a stream of durable events only
  (``ephemeral=false``) is a read like the others below (the owner's commits wake it
  through the store's notifications, so it goes on across a failover of the owner);
- ``POST /v1/sessions`` goes to the owner of a partition drawn at random (the session is
  created in the partition of the system that creates it, so sessions spread over the store
  whichever worker clients ask), or to a local system when that owner is not known;
- a registry write (``POST /v1/agents``, ``PATCH``/``DELETE /v1/agents/{id}``) goes to
  partition 0's owner the same way;
- anything else (lists, a session's events, turns and transcript, the registry's reads)
  goes to any local system (reads come from the store, which every partition's system sees
  whole), or is forwarded to a live worker when this one runs no partition yet.

When the owner is not known or cannot be reached (a failover or a hand-off in progress),
the answer is 503 ``partition_unavailable`` with ``Retry-After: 1``: nothing was done here,
and the client retries (with its idempotency key, which keeps its meaning on any worker).

Invariants: a request is forwarded at most once (a forwarded request carries
``X-Agentkeep-Forwarded``; a worker that does not run the partition either refuses it with
the 503 rather than forwarding it again), and the front authenticates a request (the same
:class:`~agentkeep.server.security.Guard` as the apps) before it forwards anything.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import AsyncIterator, Callable

import anyio
import httpx
import msgspec
import psycopg
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from agentkeep.cluster import Coordinator, Directory, membership
from agentkeep.logs import get_logger
from agentkeep.partitions import partition_of
from agentkeep.server.errors import ApiError, error_response
from agentkeep.server.front_bodies import named_session, read_body, replay
from agentkeep.server.stream_routing import stream_session, wants_ephemerals

__all__ = ["FORWARDED_HEADER", "ClusterFront"]

log = get_logger(__name__)

#: Set on a forwarded request (the forwarding worker's token): it is never forwarded again.
FORWARDED_HEADER = "x-agentkeep-forwarded"
#: The request headers a forwarded request keeps (the rest are the hop's own).
_PASSED_REQUEST = (
    "authorization",
    "content-type",
    "accept",
    "idempotency-key",
    "last-event-id",
    "traceparent",
    "tracestate",
    "cookie",
)
#: The response headers a forwarded answer keeps.
_PASSED_RESPONSE = (
    "content-type",
    "location",
    "retry-after",
    "www-authenticate",
    "cache-control",
    "allow",
    "set-cookie",
    "x-accel-buffering",
)
_SESSION = re.compile(r"^/v1/sessions/([^/]+)(/.*)?$")
_DEFINITION = re.compile(r"^/v1/agents(/[^/]+)?$")
_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: How long a read of the membership is reused.
_WORKERS_TTL_SECONDS = 0.25


class PartitionUnavailableError(ApiError):
    """503 ``partition_unavailable`` with ``Retry-After``: the partition's owner is not known
    or cannot be reached now (a failover or hand-off in progress); nothing was done here."""

    def __init__(self, partition: int, why: str) -> None:
        super().__init__(
            503,
            "partition_unavailable",
            f"Partition {partition}'s owner cannot be reached now ({why}); retry shortly "
            "(with the same idempotency key).",
            {"partition": partition},
        )
        self.headers = {"Retry-After": "1"}


class _Local(msgspec.Struct, frozen=True):
    app: Starlette
    close_streams: Callable[[], int]
    lost: Callable[[], str | None]  # why its system can no longer run it (None: it can)


class ClusterFront:
    """The worker's ASGI app (see the module). ``add``/``remove`` are called by the
    partition runner as systems open and shut; everything else runs on the event loop."""

    def __init__(
        self,
        database: str,
        count: int,
        *,
        forward_timeout_seconds: float = 180.0,
    ) -> None:
        self.directory = Directory(database)
        self.count = count
        self.coordinator: Coordinator | None = None
        self._lock = threading.Lock()
        self._local: dict[int, _Local] = {}
        self._client: httpx.AsyncClient | None = None
        self._timeout = httpx.Timeout(forward_timeout_seconds, connect=2.0)
        self._workers: list[membership.WorkerRow] = []
        self._workers_at = float("-inf")

    # -- the partitions served here ----------------------------------------------------------

    def add(
        self,
        index: int,
        app: Starlette,
        close_streams: Callable[[], int],
        *,
        lost: Callable[[], str | None] = lambda: None,
    ) -> None:
        """Partition ``index`` runs here now, served by ``app``; ``lost`` tells once its
        system lost the partition (requests then go to the owner, as for one not run here)."""
        with self._lock:
            self._local[index] = _Local(app, close_streams, lost)

    def remove(self, index: int) -> None:
        """Partition ``index`` is being given up: its requests go elsewhere from now on, and
        its open streams end (their clients reconnect, with ``Last-Event-ID``)."""
        with self._lock:
            local = self._local.pop(index, None)
        if local is not None:
            local.close_streams()

    def local(self) -> list[int]:
        """The partitions served here now."""
        with self._lock:
            return sorted(self._local)

    def close_streams(self) -> int:
        """End every open SSE stream of every local partition (at shutdown)."""
        with self._lock:
            locals_ = list(self._local.values())
        return sum(local.close_streams() for local in locals_)

    def close(self) -> None:
        """Close the membership session (the HTTP client closes with its event loop)."""
        self.directory.close()

    # -- ASGI ---------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer ``/healthz``, or hand the request to a local app or forward it."""
        if scope["type"] != "http":
            return
        try:
            response = await self._route(scope, receive, send)
        except ApiError as error:
            response = error_response(error, getattr(error, "headers", None))
        if response is not None:
            await response(scope, receive, send)

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> Response | None:
        method: str = scope["method"]
        path: str = scope["path"]
        if path == "/healthz":
            return self._healthz()
        forwarded = any(name == FORWARDED_HEADER.encode() for name, _ in scope["headers"])
        partition = self._owner_partition(method, path, scope.get("query_string", b""))
        if partition is not None:
            return await self._to_owner(scope, receive, send, partition, forwarded)
        if method == "POST" and path == "/v1/sessions":
            body = await read_body(scope, receive)
            receive = replay(body, receive)
            named = named_session(body)
            if named is not None:
                # A client-chosen id: only its partition's owner may create it.
                return await self._to_owner(
                    scope, receive, send, partition_of(named, self.count), forwarded
                )
            if not forwarded:
                # A new session lands in the partition of the system that creates it: a
                # partition drawn at random spreads them over the store whichever worker
                # is asked (a local one when that partition's owner is not known now).
                chosen = random.randrange(self.count)
                if self._local_app(chosen) is not None or await self._owner_address(chosen):
                    return await self._to_owner(scope, receive, send, chosen, forwarded)
        streamed = stream_session(method, path)  # its owner serves it best, if it runs here
        local = self._any_local(None if streamed is None else partition_of(streamed, self.count))
        if local is not None:
            await local(scope, receive, send)
            return None
        if forwarded:
            raise PartitionUnavailableError(0, "this worker runs no partition yet")
        address = await self._any_address()
        if address is None:
            raise PartitionUnavailableError(0, "no worker runs a partition yet")
        return await self._forward(scope, receive, address, None)

    async def _to_owner(
        self, scope: Scope, receive: Receive, send: Send, partition: int, forwarded: bool
    ) -> Response | None:
        """Hand the request to the local system of ``partition``, or forward it to the
        worker that runs it; 503 when neither can take it now."""
        local = self._local_app(partition)
        if local is not None:
            await local(scope, receive, send)
            return None
        if forwarded:
            raise PartitionUnavailableError(partition, "it moved")
        address = await self._owner_address(partition)
        if address is None:
            raise PartitionUnavailableError(partition, "no live owner")
        return await self._forward(scope, receive, address, partition)

    def _owner_partition(self, method: str, path: str, query: bytes = b"") -> int | None:
        """The partition whose owner must answer, or None (any system answers)."""
        found = _SESSION.match(path)
        if found is not None:
            streamed = stream_session(method, path) is not None
            if method in _WRITES or (streamed and wants_ephemerals(query)):
                return partition_of(found.group(1), self.count)
            return None
        if method in _WRITES and _DEFINITION.match(path) is not None:
            return 0
        return None

    def _local_app(self, partition: int) -> Starlette | None:
        """The app of ``partition``'s system when it runs here and still owns it. A system
        that lost its partition (a worker resumed after others took its partitions over,
        before its coordinator gave them up) is passed over: the request goes to the new
        owner, or is answered ``partition_unavailable`` with ``Retry-After``."""
        with self._lock:
            local = self._local.get(partition)
        if local is None or local.lost() is not None:
            return None
        return local.app

    def _any_local(self, prefer: int | None = None) -> Starlette | None:
        """A local system's app: ``prefer``'s if it runs here, else one that still owns its
        partition first."""
        owner = None if prefer is None else self._local_app(prefer)
        if owner is not None:
            return owner
        with self._lock:
            locals_ = [self._local[index] for index in sorted(self._local)]
        for local in locals_:
            if local.lost() is None:
                return local.app
        return locals_[0].app if locals_ else None

    def _healthz(self) -> Response:
        coordinator = self.coordinator
        if coordinator is None:
            return _json({"status": "starting", "partitions": self.local()}, 503)
        health = coordinator.health()
        body = {
            "status": "ok" if health.healthy else "degraded",
            "coordinator": msgspec.to_builtins(health),
            "partitions": self.local(),
            "ledger_wakeups": self._wakeups(),
        }
        return _json(body, 200 if health.healthy else 503)

    def _wakeups(self) -> object:
        """How this worker hears the owners' commits (its store's listener), if it does."""
        app = self._any_local()
        store = None if app is None else app.state.agentkeep.system.internals.store
        return getattr(store, "notifications", None)

    # -- where the owner is --------------------------------------------------------------------

    async def _owner_address(self, partition: int) -> str | None:
        for fresh in (False, True):
            workers = await self._read_workers(fresh=fresh)
            for worker in workers:
                if self._is_me(worker) or worker.address is None or not worker.live:
                    continue
                if partition in worker.partitions:
                    return worker.address
        return None

    async def _any_address(self) -> str | None:
        workers = await self._read_workers(fresh=False)
        for worker in sorted(workers, key=lambda w: -len(w.partitions)):
            if not self._is_me(worker) and worker.address and worker.live and worker.partitions:
                return worker.address
        return None

    def _is_me(self, worker: membership.WorkerRow) -> bool:
        coordinator = self.coordinator
        return coordinator is not None and worker.token == coordinator.token

    async def _read_workers(self, *, fresh: bool) -> list[membership.WorkerRow]:
        if not fresh and time.monotonic() - self._workers_at < _WORKERS_TTL_SECONDS:
            return self._workers
        try:
            return await anyio.to_thread.run_sync(self._read_workers_now)
        except psycopg.Error as error:
            log.warning("cluster_front_membership_unreadable", error=repr(error))
            return []

    def _read_workers_now(self) -> list[membership.WorkerRow]:
        workers = self.directory.workers()
        self._workers, self._workers_at = workers, time.monotonic()
        return workers

    # -- forwarding ----------------------------------------------------------------------------

    async def _forward(
        self, scope: Scope, receive: Receive, address: str, partition: int | None
    ) -> Response:
        request = Request(scope, receive)
        body = await read_body(scope, receive)
        headers = {
            name: value
            for name, value in request.headers.items()
            if name.lower() in _PASSED_REQUEST
        }
        headers[FORWARDED_HEADER] = "1" if self.coordinator is None else self.coordinator.token
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self._timeout)
        url = address.rstrip("/") + scope["path"]
        query = scope.get("query_string", b"").decode("latin-1")
        if query:
            url += "?" + query
        outgoing = self._client.build_request(scope["method"], url, headers=headers, content=body)
        try:
            answer = await self._client.send(outgoing, stream=True)
        except httpx.HTTPError as error:
            log.info(
                "cluster_forward_failed", partition=partition, address=address, error=repr(error)
            )
            raise PartitionUnavailableError(
                0 if partition is None else partition, "its owner did not answer"
            ) from None
        kept = {name: value for name, value in answer.headers.items() if name in _PASSED_RESPONSE}
        return StreamingResponse(
            _relay(answer),
            status_code=answer.status_code,
            headers=kept,
            background=BackgroundTask(answer.aclose),
        )


def _json(body: dict[str, object], status: int) -> Response:
    return Response(msgspec.json.encode(body), status, media_type="application/json")


async def _relay(answer: httpx.Response) -> AsyncIterator[bytes]:
    """The owner's answer as it arrives; a connection cut midway ends it (an SSE client
    reconnects with ``Last-Event-ID``)."""
    try:
        async for chunk in answer.aiter_raw():
            yield chunk
    except httpx.HTTPError as error:
        log.info("cluster_forward_cut", error=repr(error))
