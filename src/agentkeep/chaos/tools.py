"""Ledger tools: every execution is a recorded side effect, and a dead process's tools refuse.

A campaign's tools are rebuilt for each simulated process by :func:`guard_tool`, which wraps a
tool so that, before it does anything, it asks its process whether it is still alive. A process
is dead once its store has crashed or once the campaign moved on to the next process; a zombie
call of a dead process raises :class:`ZombieToolError` instead of running, so its side effect
is never mistaken for the world's. A live call is written to the :class:`Ledger` first, then
runs the wrapped tool; given a :class:`~agentkeep.chaos.batches.CompletionOrder`, it then
finishes only after the later call of its batch the order chose (invariant I14 is only tested if
results can finish out of call order).

``durable_tool`` and ``fragile_tool`` are the tools the ``RespondingModel`` calls (durable on
even call numbers, fragile — at most once — on odd ones); the fragile one is also
``transactional`` (its call-store write lands only with its result) and the durable one
saves its result with ``ctx.commit`` before returning; :func:`ledger_tools`
builds them under any names, so two providers can call tools of their own.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import msgspec

from agentkeep.tools import Tool, ToolContext, tool

if TYPE_CHECKING:
    from agentkeep.chaos.batches import CompletionOrder


# What the transactional durable tool writes into its call store (see ``ledger_tools``).
EFFECT_KEY = "effect"


class ZombieToolError(RuntimeError):
    """A tool was asked to run for a process that has already died."""


class LedgerEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One execution of a tool: a side effect the world saw."""

    generation: int
    agent_id: str
    tool: str
    call_id: str  # the provider's call id (``call-<k>``)
    internal_id: str  # agentkeep's durable id of the call
    durable: bool


class Ledger:
    """The side-effect ledger of a campaign (thread-safe, append-only, outlives processes)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[LedgerEntry] = []
        self._refused: list[LedgerEntry] = []
        self._commits: list[LedgerEntry] = []

    def record(self, entry: LedgerEntry) -> None:
        """Note one execution that is about to run (called by :func:`guard_tool` before the tool's
        body).
        """
        with self._lock:
            self._entries.append(entry)

    def committed(self, entry: LedgerEntry) -> None:
        """Note that the execution ``entry`` (the very object :meth:`record` was given: the
        check tells executions apart by identity) saved its call's result with
        ``ctx.commit``; called once the commit returned True, so it is durable."""
        with self._lock:
            self._commits.append(entry)

    @property
    def commits(self) -> list[LedgerEntry]:
        """Every execution whose ``ctx.commit`` won, in the order they committed."""
        with self._lock:
            return list(self._commits)

    def refuse(self, entry: LedgerEntry) -> None:
        """Note one call refused because its process was dead (a zombie)."""
        with self._lock:
            self._refused.append(entry)

    @property
    def entries(self) -> list[LedgerEntry]:
        """Every execution that ran, in the order they started."""
        with self._lock:
            return list(self._entries)

    @property
    def refused(self) -> list[LedgerEntry]:
        """Zombie calls that were refused (informational)."""
        with self._lock:
            return list(self._refused)


Liveness = Callable[[], bool]


def guard_tool(
    original: Tool[Any, Any],
    ledger: Ledger,
    generation: int,
    alive: Liveness,
    order: CompletionOrder | None = None,
) -> Tool[Any, Any]:
    """``original`` for one simulated process: refuses once ``alive()`` is False, records
    every execution in ``ledger`` before running it. Works for any user tool. With
    ``order``, a call whose arguments name its batch (``args.batch``, as :class:`CallArgs`
    do) returns only after the later call ``order`` chose for it has told its result."""
    execute = original.execute

    def guarded(ctx: ToolContext, args: Any) -> Any:
        if order is None or original.transactional:
            # A transactional call runs on the store's writer: it must never wait for
            # another call (which may need the writer), so it finishes in its own order
            # (never a hold's target either: those are durable calls).
            try:
                return run(ctx, args)
            finally:
                if order is not None:
                    order.finished(
                        generation,
                        ctx.agent_id,
                        ctx.provider_call_id,
                        in_call_thread=not original.transactional,
                    )
        try:
            value = run(ctx, args)
            order.hold(generation, ctx, getattr(args, "batch", ()))
            return value
        finally:
            # Also when it refused or raised: a call held for this one must not wait on.
            order.finished(generation, ctx.agent_id, ctx.provider_call_id)

    def run(ctx: ToolContext, args: Any) -> Any:
        entry = LedgerEntry(
            generation=generation,
            agent_id=ctx.agent_id,
            tool=original.name,
            call_id=ctx.provider_call_id,
            internal_id=ctx.call_id,
            durable=original.durable,
        )
        if not alive():
            ledger.refuse(entry)
            raise ZombieToolError(
                f"tool {original.name!r} refused: process generation {generation} is dead"
            )
        ledger.record(entry)
        return execute(
            cast(ToolContext, _NotingCommits(ctx, lambda: ledger.committed(entry))), args
        )

    return dataclasses.replace(original, execute=guarded)


class _NotingCommits:
    """A tool's context that notes in the ledger each ``commit`` that won."""

    def __init__(self, ctx: ToolContext, noted: Callable[[], None]) -> None:
        self._ctx = ctx
        self._noted = noted

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    def commit(self, result: Any) -> bool:
        won = self._ctx.commit(result)
        if won:
            self._noted()
        return won


class CallArgs(msgspec.Struct, frozen=True):
    """The arguments the ``RespondingModel`` sends: ``{"call": "call-<k>"}``; the
    :class:`~agentkeep.chaos.batches.BatchingModel` adds the ids of the whole batch, in call
    order (``"batch": ["call-3", "call-4"]``)."""

    call: str
    batch: tuple[str, ...] = ()


def ledger_tools(
    durable_name: str = "durable_tool", fragile_name: str = "fragile_tool"
) -> tuple[Tool[CallArgs, str], Tool[CallArgs, str]]:
    """A durable tool (may re-run after a restart) and a fragile one (runs at most once)."""

    @tool(name=durable_name, durable=True)
    def durable_tool(ctx: ToolContext, args: CallArgs) -> str:
        """A tool that may safely run again after a restart, unless it committed its result
        (``ctx.commit``, then an ignored return): a committed call never runs again (X2)."""
        ctx.commit(f"durable {args.call}")
        return "ignored: the committed result won"

    @tool(name=fragile_name, transactional=True)
    def fragile_tool(ctx: ToolContext, args: CallArgs) -> str:
        """A tool with a side effect that must never happen twice. Transactional: its
        call-store write commits with its result's claim (which erases it) or not at all,
        so no pending call ever holds it (checked as ``X1``)."""
        ctx.kv.write(EFFECT_KEY, args.call)
        return f"fragile {args.call}"

    return durable_tool, fragile_tool


__all__ = [
    "EFFECT_KEY",
    "CallArgs",
    "Ledger",
    "LedgerEntry",
    "Liveness",
    "ZombieToolError",
    "guard_tool",
    "ledger_tools",
]
