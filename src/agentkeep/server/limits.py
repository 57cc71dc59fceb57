"""What no local process can exhaust: connections, descriptors, the time to send a request,
and the log.

uvicorn's h11 protocol never times out a request that is still arriving (a client that sends
half its headers, or half its body, holds its connection and descriptor forever), and
accepts every connection until the process runs out of descriptors. :func:`protocol_class`
makes an :class:`~uvicorn.protocols.http.h11_impl.H11Protocol` subclass (uvicorn takes a
protocol class as ``Config(http=...)``) that adds, per connection:

- a **header deadline**: a request's line and headers must have arrived within
  ``header_timeout_seconds`` of the connection becoming ready for it (accepted, or its previous
  response sent); trickling bytes does not extend it;
- a **body deadline**: the whole body must have arrived within ``body_timeout_seconds`` of the
  headers;
- a **connection bound**: past ``max_connections`` open connections a new one is answered
  ``503`` (``Retry-After``, ``Connection: close``) and closed at once, before anything is read.

A connection past a deadline is closed; its request, if the app had started it, sees the
client disconnect. Invariant: a connection either has a request fully received (the app's
own time applies), or a deadline armed, or is closing.

:class:`LogBudget` is a token bucket per client address: the lines the server writes about a
client (the access log, refusals, timeouts) beyond its budget are dropped and counted, and the
next line allowed says how many were (``suppressed``), so an attack cannot fill the disk
through the log.
"""

from __future__ import annotations

import asyncio
import resource
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from agentkeep.logs import get_logger

log = get_logger(__name__)

_REFUSAL_BODY = (
    b'{"error": {"code": "too_many_connections", '
    b'"message": "Too many open connections; retry later.", "details": {}}}'
)
#: What a connection past the bound reads before it is closed.
REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"content-type: application/json\r\n"
    b"retry-after: 1\r\n"
    b"connection: close\r\n"
    + f"content-length: {len(_REFUSAL_BODY)}\r\n\r\n".encode()
    + _REFUSAL_BODY
)


@dataclass(frozen=True, kw_only=True)
class ConnectionLimits:
    """The per-connection bounds of :func:`protocol_class`.

    Attributes:
        header_timeout_seconds: The longest a request's line and headers may take to arrive.
        body_timeout_seconds: The longest a request's body may take to arrive after its headers.
        max_connections: Open connections at most; more are refused with a 503.
    """

    header_timeout_seconds: float = 10.0
    body_timeout_seconds: float = 30.0
    max_connections: int = 1024


class LogBudget:
    """A token bucket of log lines per client address (thread-safe).

    Each client may write ``burst`` lines at once and ``per_second`` lines a second after
    that; at most ``clients`` addresses are remembered (the least recently seen is forgotten).
    """

    def __init__(self, *, per_second: float = 20.0, burst: float = 100.0, clients: int = 4096):
        self._rate = per_second
        self._burst = burst
        self._clients = clients
        self._lock = threading.Lock()
        # address -> [tokens, last refill (monotonic), lines dropped since the last allowed]
        self._buckets: OrderedDict[str, list[float]] = OrderedDict()
        self.dropped = 0

    def take(self, client: str | None) -> int | None:
        """Spend a line for ``client``: None if over budget (the line must be dropped), else
        how many of its lines were dropped since the last one allowed."""
        key = client or "-"
        now = time.monotonic()
        with self._lock:
            bucket = self._buckets.pop(key, None)
            if bucket is None:
                bucket = [self._burst, now, 0.0]
                while len(self._buckets) >= self._clients:
                    self._buckets.popitem(last=False)
            self._buckets[key] = bucket
            bucket[0] = min(self._burst, bucket[0] + (now - bucket[1]) * self._rate)
            bucket[1] = now
            if bucket[0] < 1.0:
                bucket[2] += 1
                self.dropped += 1
                return None
            bucket[0] -= 1.0
            suppressed = int(bucket[2])
            bucket[2] = 0
            return suppressed

    def info(self, client: str | None, event: str, **fields: Any) -> None:
        """Log ``event`` at info for ``client`` within its budget."""
        suppressed = self.take(client)
        if suppressed is None:
            return
        if suppressed:
            fields["suppressed"] = suppressed
        log.info(event, client=client, **fields)


def raise_descriptor_limit() -> tuple[int, int]:
    """Raise the soft limit of open descriptors to the hard one; returns (soft, hard) after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as error:
            log.warning("descriptor_limit_unchanged", soft=soft, hard=hard, error=repr(error))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def connection_bound(configured: int) -> int:
    """``configured`` connections at most, and at most half the soft descriptor limit (the
    rest is for the store, the log, and the tools of running turns)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return max(1, configured)
    return max(1, min(configured, soft // 2))


def _client(address: tuple[str, int] | None) -> str | None:
    return address[0] if address else None


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with deadlines for arriving requests and a connection bound
    (module doc). Use a subclass made by :func:`protocol_class`."""

    limits: ClassVar[ConnectionLimits] = ConnectionLimits()
    budget: ClassVar[LogBudget] = LogBudget()

    _refused = False
    _deadline: asyncio.TimerHandle | None = None
    _phase: object = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Refuse past the bound; otherwise serve, with the header deadline armed."""
        if len(self.connections) >= self.limits.max_connections:
            self._refused = True
            transport.write(REFUSAL)
            transport.close()
            peer = transport.get_extra_info("peername")
            address = peer[0] if isinstance(peer, tuple) else None
            self.budget.info(address, "http_connection_refused", open=len(self.connections))
            return
        super().connection_made(transport)
        self._track()

    def connection_lost(self, exc: Exception | None) -> None:
        """Disarm, then uvicorn's own cleanup."""
        if self._refused:
            return
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """uvicorn's, then follow the request's progress."""
        if self._refused:
            return
        super().data_received(data)
        self._track()

    def on_response_complete(self) -> None:
        """A new request may start: its header deadline starts now."""
        self._phase = None
        super().on_response_complete()
        self._track()

    def _track(self) -> None:
        if self.transport is None or self.transport.is_closing():
            self._disarm()
            return
        state = self.conn.their_state
        if state is h11.IDLE:
            self._arm(h11.IDLE, self.limits.header_timeout_seconds)
        elif state is h11.SEND_BODY:
            self._arm(h11.SEND_BODY, self.limits.body_timeout_seconds)
        else:  # the request has fully arrived (or the connection is ending)
            self._disarm()

    def _arm(self, phase: object, seconds: float) -> None:
        if self._phase is phase and self._deadline is not None:
            return  # the deadline of this phase stands: trickling bytes do not extend it
        self._disarm()
        self._phase = phase
        self._deadline = self.loop.call_later(seconds, self._expired, phase)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self, phase: object) -> None:
        self._deadline = None
        if self.transport.is_closing() or self.conn.their_state is not phase:
            return
        received_headers = phase is h11.SEND_BODY
        self.budget.info(
            _client(self.client),
            "http_request_timeout",
            waiting_for="body" if received_headers else "headers",
            seconds=self.limits.body_timeout_seconds
            if received_headers
            else self.limits.header_timeout_seconds,
        )
        self.transport.close()


def protocol_class(limits: ConnectionLimits, budget: LogBudget) -> type[BoundedH11Protocol]:
    """A :class:`BoundedH11Protocol` subclass with these limits (for ``uvicorn.Config(http=)``)."""
    return type("AgentkeepH11Protocol", (BoundedH11Protocol,), {"limits": limits, "budget": budget})
