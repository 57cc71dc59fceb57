"""Deliberately broken runtimes the ``retry_forever`` and ``permission_modes`` checks must
catch (tests only; :mod:`agentkeep.chaos.retry_modes`).

- :func:`retry_gives_up_after_two_failures`: ``R1``/``R3`` (a failure note, a run stopped
  owing work).
- :func:`retry_replays_the_last_batch`: ``R2`` (a committed effect runs again).
- :func:`mode_changes_at_acceptance`: ``P1``/``P2`` (a mode in force before its message was
  consumed).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

import msgspec

from agentkeep import delivery
from agentkeep.actors.tool_runner import ToolRunner
from agentkeep.chaos._mutants.patching import patched
from agentkeep.chaos._mutants.runtime import never_committed_meanwhile
from agentkeep.loop import retry
from agentkeep.loop.context import LoopContext
from agentkeep.loop.plans import Snapshot
from agentkeep.persistence.interface import Transaction
from agentkeep.runtime import commit_plans
from agentkeep.types import MessageOptions, ToolCallBlock
from agentkeep.types.records import BlockRecord, PendingToolCall, ToolRecord


@contextmanager
def retry_gives_up_after_two_failures() -> Iterator[None]:
    """While active, ``retry_forever`` retries a failure only twice in a row, then falls back
    to the give-up path (a failure note, a failed turn)."""
    original = retry.should_retry

    def should_retry(ctx: LoopContext) -> bool:
        return original(ctx) and ctx.failures.retry_attempts < 2

    with patched(retry, "should_retry", should_retry):
        yield


@contextmanager
def retry_replays_the_last_batch() -> Iterator[None]:
    """While active, the load that follows a retry's backoff hands the loop the last answered
    tool batch again as pending (a retry that forgot its committed effects): its calls are
    dispatched again although their results are durable. Patches ``back_off`` and
    ``load_snapshot`` (the agent actor's module reference), so it reaches every agent."""
    original_back_off = retry.back_off
    original_load = commit_plans.load_snapshot
    armed = threading.Event()

    def back_off(ctx: LoopContext, *, then: Literal["pass", "load"]) -> None:
        if then == "load":
            armed.set()
        original_back_off(ctx, then=then)

    def load_snapshot(tx: Transaction, agent_id: str, *, records: bool = True) -> Snapshot:
        snapshot = original_load(tx, agent_id, records=records)
        if not armed.is_set() or snapshot.pending or not snapshot.records:
            return snapshot
        armed.clear()
        answered = {r.message.call_id for r in snapshot.records if isinstance(r, ToolRecord)}
        calls = [
            r.block
            for r in snapshot.records
            if isinstance(r, BlockRecord)
            and isinstance(r.block, ToolCallBlock)
            and r.block.call_id in answered
        ]
        if not calls:
            return snapshot
        last = calls[-1:]
        pending = tuple(
            PendingToolCall(internal_id=f"replay{i}{c.call_id}", index=i, call=c)
            for i, c in enumerate(last)
        )
        return msgspec.structs.replace(snapshot, pending=pending)

    retry.back_off = back_off
    commit_plans.load_snapshot = load_snapshot
    try:
        # The replayed calls are answered already: a resumed call's question to the writer
        # (the fence) would refuse to run them; the retry forgot that too.
        with patched(ToolRunner, "_committed_meanwhile", never_committed_meanwhile):
            yield
    finally:
        retry.back_off = original_back_off
        commit_plans.load_snapshot = original_load


@contextmanager
def mode_changes_at_acceptance() -> Iterator[None]:
    """While active, accepting a message that sets a permission mode writes it to the
    durable settings at once, instead of when the message is consumed."""
    original = delivery.accept_message

    def accept_message(tx: Transaction, agent_id: str, **kwargs: Any) -> Any:
        accepted = original(tx, agent_id, **kwargs)
        options: MessageOptions = kwargs["options"]
        settings = tx.facts.read_settings(agent_id)  # None until a first consumption chose some
        if options.permission_mode is not None and accepted[1] is not None and settings:
            mode = options.permission_mode
            tx.facts.write_settings(
                agent_id, msgspec.structs.replace(settings, permission_mode=mode)
            )
        return accepted

    with patched(delivery, "accept_message", accept_message):
        yield


__all__ = [
    "mode_changes_at_acceptance",
    "retry_gives_up_after_two_failures",
    "retry_replays_the_last_batch",
]
