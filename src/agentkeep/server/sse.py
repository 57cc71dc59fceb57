"""Committed ledger events, from a :class:`Subscription` to the event loop, holding no thread.

A :class:`EventBridge` runs one task on the loop: it takes what the subscription has ready
(a short store read in a worker thread, never a blocking wait), keeps the events the stream
sends, encodes each one to its JSON once, and queues it; when nothing is ready it waits on
the loop until the ledger hub announces the session's next commit or ephemeral event
(:meth:`~agentkeep.agent_system.surfaces.SurfaceReader.watch`), or at most ``poll_seconds``
(a wake-up lost costs that wait, never an event). The consumer side is an async
iterator of :class:`Frame`. Invariants:

- frames reach the consumer in sequence order, each once (the subscription's guarantee, kept
  by one producer task and one FIFO queue);
- the frames waiting in the queue are bounded in count (``capacity``) **and** in bytes
  (``max_bytes``; one frame larger than that is let through alone): the producer waits for
  the consumer before queueing more, so a slow client holds back the reader, not memory;
- a consumer that takes nothing for ``stall_seconds`` while the queue is at its bound is cut
  off: the producer stops reading, the queued frames are dropped (their memory is returned),
  and the iteration ends with :attr:`EventBridge.overflowed` set — the stream then tells the
  client to resume from the last id it sent;
- the producer starts only when the stream is iterated (:meth:`EventBridge.start`), and
  :meth:`EventBridge.stop` (a client left, a ``HEAD``, shutdown) ends it promptly from any
  thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Final

import msgspec

from agentkeep.agent_system.surfaces import Subscription, SurfaceReader
from agentkeep.logs import get_logger
from agentkeep.server.workers import run_sync
from agentkeep.types import SessionEvent

log = get_logger(__name__)

_END: Final = object()
_OVERFLOW: Final = object()
_POLL_SECONDS = 1.0
_BATCH = 64


class Frame(msgspec.Struct, frozen=True):
    """One event to send: the event, its JSON (the SSE ``data``) and that JSON's size."""

    event: SessionEvent
    data: str
    size: int


class EventBridge:
    """Iterate a subscription's events on the event loop (``async for``), as frames."""

    def __init__(
        self,
        subscription: Subscription,
        surfaces: SurfaceReader,
        loop: asyncio.AbstractEventLoop,
        *,
        encode: Callable[[SessionEvent], bytes],
        keep: Callable[[SessionEvent], bool] = lambda event: True,
        capacity: int = 256,
        max_bytes: int = 256 * 1024,
        stall_seconds: float = 30.0,
        on_overflow: Callable[[], None] = lambda: None,
        poll_seconds: float = _POLL_SECONDS,
    ) -> None:
        self._sub = subscription
        self._surfaces = surfaces
        self._loop = loop
        self._encode = encode
        self._keep = keep
        self._capacity = capacity
        self._max_bytes = max_bytes
        self._stall = stall_seconds
        self._on_overflow = on_overflow
        self._poll = poll_seconds
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self._moved = asyncio.Event()  # the hub announced something, or stop()
        self._room = asyncio.Event()  # the consumer took a frame, or stop()
        self._count = 0
        self._bytes = 0
        self._taken_at = time.monotonic()
        self._stopped = threading.Event()
        self._task: asyncio.Task[None] | None = None
        self.overflowed = False

    @property
    def buffered(self) -> tuple[int, int]:
        """(frames, bytes) waiting for the consumer."""
        return self._count, self._bytes

    @property
    def running(self) -> bool:
        """True while the producer task runs."""
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start reading (once, on the loop; a no-op after :meth:`stop`)."""
        if self._task is not None or self._stopped.is_set():
            return
        self._task = self._loop.create_task(self._run())

    def stop(self) -> None:
        """End the stream (idempotent, from any thread)."""
        self._stopped.set()
        self._sub.close()
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody reads
            self._loop.call_soon_threadsafe(self._interrupt)

    def _interrupt(self) -> None:
        self._moved.set()
        self._room.set()
        if self._task is None:
            self._queue.put_nowait(_END)

    def __aiter__(self) -> EventBridge:
        return self

    async def __anext__(self) -> Frame:
        item = await self._queue.get()
        if item is _END or item is _OVERFLOW:
            self._queue.put_nowait(item)  # a later call ends too
            raise StopAsyncIteration
        assert isinstance(item, Frame)
        self._count -= 1
        self._bytes -= item.size
        self._taken_at = time.monotonic()
        self._room.set()
        return item

    def _ready(self) -> list[Frame] | None:
        """In a worker thread: the frames the subscription has ready now (None: it ended)."""
        frames: list[Frame] = []
        while len(frames) < _BATCH:
            try:
                event = self._sub.next(timeout_seconds=0)
            except TimeoutError:
                break
            except StopIteration:
                return frames or None
            if self._keep(event):
                raw = self._encode(event)
                frames.append(Frame(event=event, data=raw.decode(), size=len(raw)))
        return frames

    async def _admit(self, size: int) -> bool:
        """Wait for room for ``size`` bytes; False when stopped or the consumer stalled."""
        waiting_since = time.monotonic()
        while self._count >= self._capacity or (
            self._count > 0 and self._bytes + size > self._max_bytes
        ):
            if self._stopped.is_set():
                return False
            left = max(waiting_since, self._taken_at) + self._stall - time.monotonic()
            if left <= 0:
                self.overflowed = True
                return False
            self._room.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._room.wait(), min(left, _POLL_SECONDS))
        self._count += 1
        self._bytes += size
        return not self._stopped.is_set()

    def _announced(self) -> None:  # from the committing thread
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._moved.set)

    async def _run(self) -> None:
        unwatch = self._surfaces.watch(self._sub.agent_id, self._announced)
        try:
            while not self._stopped.is_set():
                self._moved.clear()  # before the read: anything announced after it wakes us
                frames = await run_sync(self._ready)
                if frames is None:
                    break
                for frame in frames:
                    if not await self._admit(frame.size):
                        return
                    self._queue.put_nowait(frame)
                if not frames:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._moved.wait(), self._poll)
        except Exception as error:  # the stream ends; the client resumes from its last id
            log.warning("sse_bridge_failed", session_id=self._sub.agent_id, error=repr(error))
        finally:
            unwatch()
            self._sub.close()
            if self.overflowed:
                log.info(
                    "sse_consumer_stalled",
                    session_id=self._sub.agent_id,
                    stall_seconds=self._stall,
                )
                self._drop_queued()
            else:
                self._queue.put_nowait(_END)

    def _drop_queued(self) -> None:
        """Drop every queued frame and end the iteration (an overflow)."""
        while not self._queue.empty():
            self._queue.get_nowait()
        self._count = 0
        self._bytes = 0
        self._queue.put_nowait(_OVERFLOW)
        self._on_overflow()
