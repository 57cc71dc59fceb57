"""The server's worker threads (``server/workers.py``): the hop of every blocking call a
handler makes, with AnyIO's rules (bounded, started on demand, ended when idle, a started
call never abandoned, the caller's context) at a fraction of its cost (issue 29 item 3)."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Callable

import pytest

from agentkeep.server.workers import WorkerPool, pool, run_sync

TIMEOUT = 10.0
_who: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


def _wait_for(condition: Callable[[], bool], seconds: float = TIMEOUT) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def test_calls_run_in_threads_and_return_or_raise() -> None:
    async def main() -> None:
        loop_thread = threading.get_ident()
        assert await run_sync(threading.get_ident) != loop_thread

        def fails() -> None:
            raise KeyError("from the thread")

        with pytest.raises(KeyError, match="from the thread"):
            await run_sync(fails)
        assert pool() is pool()  # one pool per loop

    asyncio.run(main())


def test_a_call_runs_in_a_copy_of_the_callers_context() -> None:
    async def main() -> None:
        _who.set("the caller")
        assert await run_sync(_who.get) == "the caller"
        await run_sync(lambda: _who.set("the thread"))
        assert _who.get() == "the caller"  # a copy: the call's changes stay there

    asyncio.run(main())


def test_at_most_max_threads_run_and_every_queued_call_is_taken() -> None:
    workers = WorkerPool(max_threads=3, idle_seconds=TIMEOUT)
    release = threading.Event()
    lock = threading.Lock()
    running = 0
    most = 0

    def held(n: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        assert release.wait(TIMEOUT)
        with lock:
            running -= 1
        return n

    async def main() -> list[int]:
        calls = [asyncio.ensure_future(workers.run(lambda n=n: held(n))) for n in range(10)]
        await asyncio.to_thread(lambda: _wait_for(lambda: running == 3))
        assert workers.threads == 3
        release.set()
        return list(await asyncio.gather(*calls))

    assert asyncio.run(main()) == list(range(10))
    assert most == 3


def test_idle_threads_end() -> None:
    workers = WorkerPool(max_threads=4, idle_seconds=0.05)

    async def main() -> None:
        await asyncio.gather(*(workers.run(lambda: time.sleep(0.01)) for _ in range(8)))

    asyncio.run(main())
    assert _wait_for(lambda: workers.threads == 0)
    asyncio.run(main())  # and start again on demand
    assert _wait_for(lambda: workers.threads == 0)


def test_a_cancelled_caller_waits_for_its_call_to_finish() -> None:
    started, release = threading.Event(), threading.Event()
    finished: list[str] = []

    def call() -> str:
        started.set()
        assert release.wait(TIMEOUT)
        finished.append("done")
        return "value"

    async def main() -> None:
        task = asyncio.ensure_future(run_sync(call))
        await asyncio.to_thread(started.wait, TIMEOUT)
        task.cancel()
        for _ in range(20):  # the cancellation is delivered; the call still runs
            await asyncio.sleep(0)
        assert not task.done()
        assert finished == []
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert finished == ["done"]

    asyncio.run(main())


def test_the_threads_end_once_their_event_loop_closed() -> None:
    async def main() -> WorkerPool:
        await asyncio.gather(*(run_sync(lambda: time.sleep(0.01)) for _ in range(5)))
        return pool()

    workers = asyncio.run(main())  # asyncio.run closes the loop
    assert workers.threads > 0
    assert _wait_for(lambda: workers.threads == 0, seconds=5.0)  # not the 10 s idle time
