"""Committed ledger events, from a blocking :class:`Subscription` to the event loop.

A :class:`EventBridge` owns one thread that iterates the subscription (it blocks: it reads
the store and waits on the ledger hub), keeps the events the stream sends, encodes each one
to its JSON once, and hands it to the loop with ``loop.call_soon_threadsafe``; the loop side
is an async iterator of :class:`Frame`. Invariants:

- frames reach the loop in sequence order, each once (the subscription's guarantee, kept by
  one producer thread and one FIFO queue);
- the frames waiting in the queue are bounded in count (``capacity``) **and** in bytes
  (``max_bytes``; one frame larger than that is let through alone): the thread waits for the
  consumer before handing more over, so a slow client holds back the reader, not memory;
- a consumer that takes nothing for ``stall_seconds`` while the queue is at its bound is cut
  off: the thread stops reading, the queued frames are dropped (their memory is returned),
  and the iteration ends with :attr:`EventBridge.overflowed` set — the stream then tells the
  client to resume from the last id it sent;
- the thread starts only when the stream is iterated (:meth:`EventBridge.start`), and
  :meth:`EventBridge.stop` (a client left, a ``HEAD``, shutdown) ends it promptly from any
  thread: it closes the subscription (which wakes the blocked read) and queues the end.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Final

import msgspec
import structlog

from agentkeep.model import SessionEvent
from agentkeep.persistence.ledger import Subscription

log = structlog.get_logger(__name__)

_END: Final = object()
_OVERFLOW: Final = object()
_POLL_SECONDS = 1.0


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
        loop: asyncio.AbstractEventLoop,
        *,
        encode: Callable[[SessionEvent], bytes],
        keep: Callable[[SessionEvent], bool] = lambda event: True,
        capacity: int = 256,
        max_bytes: int = 256 * 1024,
        stall_seconds: float = 30.0,
        on_overflow: Callable[[], None] = lambda: None,
    ) -> None:
        self._sub = subscription
        self._loop = loop
        self._encode = encode
        self._keep = keep
        self._capacity = capacity
        self._max_bytes = max_bytes
        self._stall = stall_seconds
        self._on_overflow = on_overflow
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self._cond = threading.Condition()
        self._count = 0
        self._bytes = 0
        self._taken_at = time.monotonic()
        self._started = False
        self._stopped = threading.Event()
        self.overflowed = False
        self._thread = threading.Thread(
            target=self._run, name=f"agentkeep-sse-{subscription.session_id}", daemon=True
        )

    @property
    def buffered(self) -> tuple[int, int]:
        """(frames, bytes) waiting for the consumer."""
        with self._cond:
            return self._count, self._bytes

    @property
    def thread_alive(self) -> bool:
        """True while the reading thread runs."""
        return self._thread.is_alive()

    def start(self) -> None:
        """Start reading (once; a no-op after :meth:`stop`)."""
        if self._started or self._stopped.is_set():
            return
        self._started = True
        self._thread.start()

    def stop(self) -> None:
        """End the stream (idempotent, from any thread)."""
        self._stopped.set()
        with self._cond:
            self._cond.notify_all()
        self._sub.close()
        self._hand_over(_END)

    def __aiter__(self) -> EventBridge:
        return self

    async def __anext__(self) -> Frame:
        item = await self._queue.get()
        if item is _END or item is _OVERFLOW:
            self._queue.put_nowait(item)  # a later call ends too
            raise StopAsyncIteration
        assert isinstance(item, Frame)
        with self._cond:
            self._count -= 1
            self._bytes -= item.size
            self._taken_at = time.monotonic()
            self._cond.notify_all()
        return item

    def _hand_over(self, item: object) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the loop has closed: nobody is reading any more
            self._stopped.set()

    def _drop_queued(self) -> None:
        """On the loop: drop every queued frame and end the iteration (an overflow)."""
        while not self._queue.empty():
            self._queue.get_nowait()
        with self._cond:
            self._count = 0
            self._bytes = 0
        self._queue.put_nowait(_OVERFLOW)
        self._on_overflow()

    def _admit(self, size: int) -> bool:
        """Wait for room for ``size`` bytes; False when stopped or the consumer stalled."""
        with self._cond:
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
                self._cond.wait(min(left, _POLL_SECONDS))
            self._count += 1
            self._bytes += size
            return not self._stopped.is_set()

    def _run(self) -> None:
        try:
            while not self._stopped.is_set():
                try:
                    event = self._sub.next(timeout_seconds=_POLL_SECONDS)
                except TimeoutError:
                    continue
                except StopIteration:
                    break
                if not self._keep(event):
                    continue
                raw = self._encode(event)
                frame = Frame(event=event, data=raw.decode(), size=len(raw))
                if not self._admit(frame.size):
                    break
                self._hand_over(frame)
        except Exception as error:  # the stream ends; the client resumes from its last id
            log.warning("sse_bridge_failed", session_id=self._sub.session_id, error=repr(error))
        finally:
            self._sub.close()
            if self.overflowed:
                log.info(
                    "sse_consumer_stalled",
                    session_id=self._sub.session_id,
                    stall_seconds=self._stall,
                )
                try:
                    self._loop.call_soon_threadsafe(self._drop_queued)
                except RuntimeError:
                    self._stopped.set()
            else:
                self._hand_over(_END)
