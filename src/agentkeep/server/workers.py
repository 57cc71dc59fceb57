"""The worker threads that run the server's blocking calls, off the event loop.

Every system call a handler makes runs in a worker thread (``context.call``): a store read,
a write waiting for its group's COMMIT, a pykka ask may block. :class:`WorkerPool` is the
hop, with the rules of the AnyIO worker threads it replaces (Starlette's
``run_in_threadpool``), at about a tenth of their cost (measured ~5 µs of CPU a call against
~55 µs: the pool hands each call to a thread through one C queue and answers it with one
``call_soon_threadsafe``, where AnyIO enters a cancel scope, a capacity limiter and a
per-call queue):

- **bounded**: at most ``max_threads`` threads (AnyIO's default limit, 40); a call queued
  while every one is busy waits for the first to finish;
- **started on demand, ended when idle**: a thread is started when a call finds none idle,
  and ends after ``idle_seconds`` without work, so a quiet server holds no pool, or within
  a second of its event loop closing (a stopped server);
- **a started call is never abandoned**: a caller cancelled while its call runs (a server
  shutting down) waits for the call to finish, then is cancelled — the call's effect is
  never cut in half by the cancellation, nor left running unawaited;
- **in the caller's context**: each call runs in a copy of the caller's ``contextvars``.

One pool per event loop (:func:`run_sync`), as AnyIO keeps one per loop: two servers in one
process never wait for each other's calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: The most worker threads a pool runs at once (AnyIO's default thread limit).
MAX_THREADS = 40
#: How long an idle worker waits for work before it ends (AnyIO's idle time).
IDLE_SECONDS = 10.0
#: How often an idle worker looks whether its event loop has closed (then it ends).
_POLL_SECONDS = 1.0

_Job = tuple[Callable[[], Any], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


def _answer(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    """On the loop: settle ``future`` (its awaiter may have stopped waiting: a shutdown)."""
    if future.done():
        return
    if error is None:
        future.set_result(value)
    else:
        future.set_exception(error)


class WorkerPool:
    """Threads running blocking calls for one event loop (see the module docstring).

    Invariant: a queued job is always taken by a thread. ``_idle`` counts the threads
    waiting for a job (each takes one); a submit that queues more jobs than there are idle
    threads starts one unless ``max_threads`` run (then every thread is busy and loops back
    for the queue); a thread ends only when it finds the queue empty while it counts itself
    out, under the lock the submit counts under.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop | None = None,
        *,
        max_threads: int = MAX_THREADS,
        idle_seconds: float = IDLE_SECONDS,
    ):
        self._loop = None if loop is None else weakref.ref(loop)
        self._max = max_threads
        self._idle_seconds = idle_seconds
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0  # started and not ended
        self._idle = 0  # waiting for a job (an estimate read and written under the lock)

    @property
    def threads(self) -> int:
        """How many worker threads are alive."""
        return self._threads

    async def run(self, function: Callable[[], T]) -> T:
        """``function()`` in a worker thread; its value, or what it raised."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        context = contextvars.copy_context()
        self._submit((lambda: context.run(function), loop, future))
        cancelled = False
        while True:
            try:
                await asyncio.shield(future)
            except asyncio.CancelledError:
                cancelled = True  # the caller was cancelled: wait for the call all the same
                if not future.done():
                    continue
            except BaseException:  # the call's own error, raised by ``result`` below
                pass
            break
        if cancelled:
            raise asyncio.CancelledError
        return future.result()

    def _submit(self, job: _Job) -> None:
        self._jobs.put(job)
        with self._lock:
            if self._jobs.qsize() <= self._idle:
                return  # an idle thread takes each queued job
            if self._threads >= self._max:
                return  # the first thread to finish its call takes it
            self._threads += 1
        threading.Thread(target=self._work, name="agentkeep-http-worker", daemon=True).start()

    def _work(self) -> None:
        jobs, lock = self._jobs, self._lock
        idle_since = time.monotonic()
        while True:
            with lock:
                self._idle += 1
            try:
                function, loop, future = jobs.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                done = self._loop_closed() or time.monotonic() - idle_since >= self._idle_seconds
                with lock:
                    self._idle -= 1
                    if done and jobs.empty():  # a submit after this counts the thread out
                        self._threads -= 1
                        return
                continue
            with lock:
                self._idle -= 1
            try:
                value, error = function(), None
            except BaseException as raised:  # handed to the caller, as AnyIO does
                value, error = None, raised
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody awaits it
                loop.call_soon_threadsafe(_answer, future, value, error)
            del function, loop, future, value, error
            idle_since = time.monotonic()

    def _loop_closed(self) -> bool:
        if self._loop is None:
            return False
        loop = self._loop()
        return loop is None or loop.is_closed()


_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, WorkerPool] = (
    weakref.WeakKeyDictionary()
)
_pools_lock = threading.Lock()


def pool() -> WorkerPool:
    """The running event loop's pool (made at its first use)."""
    loop = asyncio.get_running_loop()
    found = _pools.get(loop)
    if found is None:
        with _pools_lock:
            found = _pools.setdefault(loop, WorkerPool(loop))
    return found


async def run_sync(function: Callable[[], T]) -> T:
    """``function()`` in a worker thread of the running loop's pool."""
    return await pool().run(function)
