"""The CPU one blocking call's hop to a worker thread costs the daemon: its own pool
(``agentkeep.server.workers.run_sync``) against Starlette's ``run_in_threadpool`` (AnyIO's
pool, what ``server.context.call`` used before), 100 callers at once on one event loop, in one
run. Printed: µs of CPU per hop for each, and the ratio [goal: the pool ≤ 1/3 of AnyIO's].

Run: ``PYTHONPATH=src .venv/bin/python bench/worker_hop.py [--hops 5000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable

from starlette.concurrency import run_in_threadpool

from agentkeep.server.workers import run_sync

Hop = Callable[[Callable[[], int]], Awaitable[int]]


def _noop() -> int:
    return 1


async def _cost(hop: Hop, count: int, callers: int) -> float:
    """CPU seconds per hop of ``count`` no-op calls made by ``callers`` concurrent callers."""
    done = 0

    async def caller() -> None:
        nonlocal done
        while done < count:
            done += 1
            await hop(_noop)

    started = time.process_time()
    await asyncio.gather(*(caller() for _ in range(callers)))
    return (time.process_time() - started) / count


async def _measure(hops: int, callers: int) -> tuple[float, float]:
    await _cost(run_sync, hops // 10, callers)  # warm both pools
    await _cost(run_in_threadpool, hops // 10, callers)
    return await _cost(run_sync, hops, callers), await _cost(run_in_threadpool, hops, callers)


def main(argv: list[str] | None = None) -> int:
    """Run the bench and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hops", type=int, default=5000)
    parser.add_argument("--callers", type=int, default=100)
    args = parser.parse_args(argv)
    ours, anyio = asyncio.run(_measure(args.hops, args.callers))
    print(f"server.workers.run_sync     {ours * 1e6:8.1f} us CPU a hop")
    print(f"starlette run_in_threadpool {anyio * 1e6:8.1f} us CPU a hop")
    print(f"the pool vs AnyIO's: {ours / anyio:.2f}x [goal <= 0.33x]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
