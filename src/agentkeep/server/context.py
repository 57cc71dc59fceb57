"""What every route handler reaches: the system, the open streams, the timing knobs.

Handlers run on the event loop and never call the system there: every system call goes to
a worker thread (:func:`call`), because a store read, a write through the writer or a pykka
future may block for as long as the store is busy.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import anyio
import anyio.to_thread
from starlette.requests import Request

from agentkeep.agent_system import AgentSystem
from agentkeep.errors import AgentkeepError
from agentkeep.server.errors import ApiError, from_library
from agentkeep.server.limits import LogBudget
from agentkeep.server.workers import run_sync

T = TypeVar("T")


class SaturatedError(ApiError):
    """503 ``saturated`` with ``Retry-After``: the daemon is at a configured concurrency and
    refuses rather than queueing (retrying is safe: nothing was done; send with an
    idempotency key)."""

    def __init__(self, what: str) -> None:
        super().__init__(
            503, "saturated", f"The daemon is at its limit of {what}; retry later.", {}
        )
        self.headers = {"Retry-After": "1"}


class OpenStreams:
    """The SSE streams being served, so shutdown can end each of them.

    The invariant: once :meth:`close_all` ran, no stream stays open — those registered are
    told to stop, and :meth:`add` refuses (returns False) any that starts afterwards.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stops: dict[int, Callable[[], None]] = {}
        self._buffered: dict[int, Callable[[], int]] = {}
        self._next = 0
        self._closed = False
        #: Streams ended because their client stopped reading (their buffer stayed full).
        self.overflowed = 0

    def add(
        self, stop: Callable[[], None], *, buffered: Callable[[], int] | None = None
    ) -> int | None:
        """Register a stream's stop callback (and what tells its buffered bytes); None once
        shutdown began."""
        with self._lock:
            if self._closed:
                return None
            self._next += 1
            self._stops[self._next] = stop
            if buffered is not None:
                self._buffered[self._next] = buffered
            return self._next

    def remove(self, key: int) -> None:
        """The stream ended on its own (its client left, or it finished)."""
        with self._lock:
            self._stops.pop(key, None)
            self._buffered.pop(key, None)

    def note_overflow(self) -> None:
        """A stream was cut off because its client stopped reading."""
        with self._lock:
            self.overflowed += 1

    def buffered_bytes(self) -> int:
        """The bytes of events the open streams hold for their clients."""
        with self._lock:
            counters = list(self._buffered.values())
        return sum(counter() for counter in counters)

    def close_all(self) -> int:
        """Stop every open stream and refuse new ones; returns how many were open."""
        with self._lock:
            self._closed = True
            stops = list(self._stops.values())
            self._stops.clear()
            self._buffered.clear()
        for stop in stops:
            stop()
        return len(stops)

    @property
    def closed(self) -> bool:
        """True once shutdown began (:meth:`close_all`)."""
        return self._closed

    def __len__(self) -> int:
        with self._lock:
            return len(self._stops)


@dataclass(kw_only=True)
class ServerContext:
    """The state the app's handlers share.

    Attributes:
        system: The embedded system (the server never closes it; its owner does).
        streams: The open SSE streams.
        heartbeat_seconds: The interval of SSE heartbeat comments.
        wait_seconds: How long a request that waits (a turn's end, a compaction) may wait.
        wait_threads: How many waiting requests may wait at once.
        wait_limiter: Their threads' limiter (made on the event loop, at first use).
        max_waiting: How many requests may wait for a turn's end at once (they wait on the
            event loop, holding no thread); past it a waiting send is refused (503).
        waiting: How many do (counted on the event loop).
        max_streams: How many SSE streams may be open at once (each holds a subscription
            and up to its buffer); past it a new one is refused (503).
        log_budget: The per-client budget of log lines about requests.
        stream_buffer_bytes: The most bytes of events an SSE stream holds for its client.
        stream_stall_seconds: How long a stream's full buffer may wait for its client
            before the stream ends with a ``resume`` event.
        stream_send_timeout_seconds: How long one write to an SSE client may wait.
        stream_poll_seconds: How often an SSE stream re-reads the ledger when nothing woke
            it (a commit's announcement, here or, on a partitioned store, another process's
            notification, wakes it at once; the poll only bounds a lost wake-up).
    """

    system: AgentSystem
    streams: OpenStreams = field(default_factory=OpenStreams)
    heartbeat_seconds: float = 15.0
    wait_seconds: float = 120.0
    wait_threads: int = 256
    wait_limiter: anyio.CapacityLimiter | None = None
    max_waiting: int = 1024
    waiting: int = 0
    max_streams: int = 512
    log_budget: LogBudget = field(default_factory=LogBudget)
    stream_buffer_bytes: int = 256 * 1024
    stream_stall_seconds: float = 30.0
    stream_send_timeout_seconds: float = 120.0
    stream_poll_seconds: float = 1.0


def context(request: Request) -> ServerContext:
    """The :class:`ServerContext` of the app serving ``request``."""
    found: ServerContext = request.app.state.agentkeep
    return found


async def call(function: Callable[..., T], *args: object, **kwargs: object) -> T:
    """Run a blocking system call in a worker thread (:mod:`agentkeep.server.workers`); a
    library error becomes its :class:`ApiError`."""
    return await run_sync(functools.partial(_translated, function, *args, **kwargs))


async def call_waiting(
    ctx: ServerContext, function: Callable[..., T], *args: object, **kwargs: object
) -> T:
    """:func:`call` for a call that waits (an abort): it runs on threads of its own
    (:attr:`ServerContext.wait_threads` at most), so waiting requests never take the worker
    threads every other request needs; past that many it is refused (:class:`SaturatedError`),
    never queued."""
    if ctx.wait_limiter is None:
        ctx.wait_limiter = anyio.CapacityLimiter(ctx.wait_threads)
    if ctx.wait_limiter.available_tokens < 1:
        raise SaturatedError(f"{ctx.wait_threads} waiting calls")
    return await anyio.to_thread.run_sync(
        functools.partial(_translated, function, *args, **kwargs), limiter=ctx.wait_limiter
    )


def _translated(function: Callable[..., T], *args: object, **kwargs: object) -> T:
    try:
        return function(*args, **kwargs)
    except AgentkeepError as error:
        raise from_library(error) from error
