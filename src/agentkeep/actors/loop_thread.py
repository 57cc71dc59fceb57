"""Which agent's loop the calling thread runs in: hooks and tools run marked, so waiting on
their own agent from there is refused instead of deadlocking (invariant I26)."""

from __future__ import annotations

import threading
from types import TracebackType

_inside = threading.local()


def current_loop_agent() -> str | None:
    """The id of the agent whose loop the calling thread is running in (a hook or a tool),
    or None outside every loop."""
    return getattr(_inside, "agent_id", None)


class _InsideLoop:
    """The mark of one ``with inside_loop(...)`` block (a plain class, not a generator
    context manager: the actor enters one for every hook of every step)."""

    __slots__ = ("_agent_id", "_previous")

    def __init__(self, agent_id: str) -> None:
        self._agent_id = agent_id
        self._previous: str | None = None

    def __enter__(self) -> None:
        self._previous = getattr(_inside, "agent_id", None)
        _inside.agent_id = self._agent_id

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        _inside.agent_id = self._previous


def inside_loop(agent_id: str) -> _InsideLoop:
    """Mark the calling thread as running inside ``agent_id``'s loop for the ``with`` block.

    The actor wraps every hook it runs and every tool call in it; nesting restores the outer
    mark on exit.
    """
    return _InsideLoop(agent_id)
