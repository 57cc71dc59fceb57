"""Which agent's loop the calling thread runs in: hooks and tools run marked, so waiting on
their own agent from there is refused instead of deadlocking (invariant 20)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

_inside = threading.local()


def current_loop_agent() -> str | None:
    """The id of the agent whose loop the calling thread is running in (a hook or a tool),
    or None outside every loop."""
    return getattr(_inside, "agent_id", None)


@contextmanager
def inside_loop(agent_id: str) -> Iterator[None]:
    """Mark the calling thread as running inside ``agent_id``'s loop for the block.

    The actor wraps every hook it runs and every tool call in it; nesting restores the outer
    mark on exit.
    """
    previous = getattr(_inside, "agent_id", None)
    _inside.agent_id = agent_id
    try:
        yield
    finally:
        _inside.agent_id = previous
