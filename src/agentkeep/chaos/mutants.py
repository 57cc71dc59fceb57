"""Deliberately broken runtimes the checks must catch (tests only).

A check that cannot fail is no check: each mutant here breaks one promise of spec §7 on
purpose, and a test runs a campaign (or the property machine) under it and expects a catch.

:func:`results_in_finish_order` breaks §7.9: a tool batch commits each result as soon as its
call finishes, so a later call that finishes first lands before an earlier one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from agentkeep.loop.batch import ToolBatch
from agentkeep.model import PendingToolCall, ToolResultMessage


@contextmanager
def results_in_finish_order() -> Iterator[None]:
    """While active, every :class:`~agentkeep.loop.batch.ToolBatch` commits results in the
    order its calls finish (results known when it starts first, in call order) instead of
    call order. Patches the class, so it reaches every agent in this process; not
    thread-safe against a second patch of the same methods."""
    saved = {
        name: getattr(ToolBatch, name)
        for name in ("finish", "next_ready", "is_last", "committed_one")
    }
    original_finish = saved["finish"]
    original_committed = saved["committed_one"]

    def state_of(batch: ToolBatch) -> dict[str, Any]:
        state: dict[str, Any] = batch.__dict__.setdefault(
            "_finish_order", {"finished": [], "committed": set(), "committing": None}
        )
        return state

    def finish(self: ToolBatch, internal_id: str, result: ToolResultMessage) -> bool:
        finished: bool = original_finish(self, internal_id, result)
        if finished:
            state_of(self)["finished"].append(internal_id)
        return finished

    def next_ready(self: ToolBatch) -> tuple[PendingToolCall, ToolResultMessage] | None:
        if self.done:
            return None
        state = state_of(self)
        by_id = {c.internal_id: c for c in self.calls}
        # Finished calls in finish order, then whatever else has a result (known at the
        # start, or answered by an abort) in call order.
        candidates = [*state["finished"], *(c.internal_id for c in self.calls)]
        for internal_id in candidates:
            if internal_id in state["committed"] or internal_id not in self.results:
                continue
            state["committing"] = internal_id
            return by_id[internal_id], self.results[internal_id]
        return None

    def is_last(self: ToolBatch, pending: PendingToolCall) -> bool:
        return self.next_index == len(self.calls) - 1  # the last result to commit

    def committed_one(self: ToolBatch) -> None:
        state = state_of(self)
        if state["committing"] is not None:
            state["committed"].add(state["committing"])
            state["committing"] = None
        original_committed(self)

    patches: dict[str, Any] = {
        "finish": finish,
        "next_ready": next_ready,
        "is_last": is_last,
        "committed_one": committed_one,
    }
    for name, replacement in patches.items():
        setattr(ToolBatch, name, replacement)
    try:
        yield
    finally:
        for name, original in saved.items():
            setattr(ToolBatch, name, original)


__all__ = ["results_in_finish_order"]
