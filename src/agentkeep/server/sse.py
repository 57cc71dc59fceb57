"""Committed ledger events, from a blocking :class:`Subscription` to the event loop.

A :class:`EventBridge` owns one thread that iterates the subscription (it blocks: it reads
the store and waits on the ledger hub) and hands each event to the loop with
``loop.call_soon_threadsafe``; the loop side is an async iterator. Invariants:

- events reach the loop in sequence order, each once (the subscription's guarantee, kept by
  one producer thread and one FIFO queue);
- at most ``capacity`` events wait in the queue: the thread takes a slot before handing one
  over and the consumer gives it back, so a slow client holds back the reader instead of
  filling memory;
- :meth:`EventBridge.stop` (a client left, or shutdown) ends the iteration promptly from any
  thread: it closes the subscription (which wakes the blocked read) and queues the end.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Final

from agentkeep.logs import get_logger
from agentkeep.model import SessionEvent
from agentkeep.persistence.ledger import Subscription

log = get_logger(__name__)

_END: Final = object()
_POLL_SECONDS = 1.0


class EventBridge:
    """Iterate a subscription's events on the event loop (``async for``)."""

    def __init__(
        self,
        subscription: Subscription,
        loop: asyncio.AbstractEventLoop,
        *,
        capacity: int = 256,
    ) -> None:
        self._sub = subscription
        self._loop = loop
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self._slots = threading.Semaphore(capacity)
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"agentkeep-sse-{subscription.session_id}", daemon=True
        )

    def start(self) -> None:
        """Start reading (call once, on the loop)."""
        self._thread.start()

    def stop(self) -> None:
        """End the stream (idempotent, from any thread)."""
        self._stopped.set()
        self._sub.close()
        self._hand_over(_END)

    def __aiter__(self) -> EventBridge:
        return self

    async def __anext__(self) -> SessionEvent:
        item = await self._queue.get()
        if item is _END:
            self._queue.put_nowait(_END)  # a later call ends too
            raise StopAsyncIteration
        self._slots.release()
        assert isinstance(item, SessionEvent)
        return item

    def _hand_over(self, item: object) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the loop has closed: nobody is reading any more
            self._stopped.set()

    def _run(self) -> None:
        try:
            while not self._stopped.is_set():
                try:
                    event = self._sub.next(timeout_seconds=_POLL_SECONDS)
                except TimeoutError:
                    continue
                except StopIteration:
                    break
                while not self._slots.acquire(timeout=_POLL_SECONDS):
                    if self._stopped.is_set():
                        return
                self._hand_over(event)
        except Exception as error:  # the stream ends; the client resumes from its last id
            log.warning("sse_bridge_failed", session_id=self._sub.session_id, error=repr(error))
        finally:
            self._sub.close()
            self._hand_over(_END)
