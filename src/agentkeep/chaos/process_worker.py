"""The worker of the real process campaign: one OS process running an ``AgentSystem``.

Run as ``python -m agentkeep.chaos.process_worker HOME LEDGER GENERATION OFFERS``. It opens
the system on ``HOME`` with the :class:`~agentkeep.providers.RespondingModel` and the ledger
tools, creates the agent if it does not exist yet, offers the first ``OFFERS`` messages of
:data:`OFFERS` in order (fixed ids, each also the turn's idempotency key: a message already
durable is an idempotent repeat), retries the first with a fresh message id and the same key
(a repeat of its turn by the key alone), waits for idle and closes. It prints
``READY`` once imported (the parent's timer starts there) and ``RESULT {json}`` at the end.

Every tool execution, and every acknowledged ``send``, is appended to the ``LEDGER`` file
(one JSON line, ``write(2)`` then ``fsync``) before the tool runs or the next message is
offered, with the process's pid and generation: the file is the side-effect record the parent
judges, and it survives a ``SIGKILL`` at any instant.

Environment knobs, each set by the parent for one process only:

- ``AGENTKEEP_FAULT_AT`` / ``AGENTKEEP_FAULT_MODE=kill``: the store kills the process at
  operation N (see :mod:`agentkeep.persistence.faults`);
- ``AGENTKEEP_CHAOS_KILL_AT_TOOL=N``: the process kills itself right after the N-th tool
  execution's ledger entry is durable, before the tool returns (a side effect without its
  result);
- ``AGENTKEEP_CHAOS_MUTANT=rerun_fragile``: a deliberately broken runtime whose resumed
  non-durable calls run again (the campaign's tests prove the checker catches it); or the
  name of a ledger mutant (:data:`agentkeep.chaos._mutants.runtime.LEDGER_MUTANTS`), installed for
  the whole process;
- ``AGENTKEEP_CHAOS_SUBSCRIBER=SEED``: run a
  :class:`~agentkeep.chaos.ledger_subscriber.RecordingSubscriber` on the session, logging to
  ``subscriber.jsonl`` beside ``LEDGER``, disconnecting at points drawn from ``SEED``; drained
  before the system closes; with ``AGENTKEEP_CHAOS_SUBSCRIBER_KILL_AT=N`` it SIGKILLs the
  process on receiving its N-th event, before recording it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import msgspec
import structlog

from agentkeep.agent_system import AgentSystem
from agentkeep.chaos.backend import chaos_database
from agentkeep.chaos.ledger_reads import read_all
from agentkeep.chaos.ledger_subscriber import (
    SUBSCRIBER_ENV,
    SUBSCRIBER_KILL_ENV,
    RecordingSubscriber,
)
from agentkeep.chaos.process import Offer
from agentkeep.chaos.tools import Ledger, LedgerEntry, guard_tool, ledger_tools
from agentkeep.errors import UnknownAgentError
from agentkeep.messages import user
from agentkeep.providers.catalog import Providers
from agentkeep.providers.responding import RespondingModel

AGENT_ID = "killagent"
PROVIDER = "local"
MODEL = "gym-1"
OFFERS: tuple[Offer, ...] = tuple(
    Offer(id=f"k{index}", text=f"kill message {index}") for index in range(4)
)
KILL_AT_TOOL_ENV = "AGENTKEEP_CHAOS_KILL_AT_TOOL"
MUTANT_ENV = "AGENTKEEP_CHAOS_MUTANT"
RERUN_FRAGILE = "rerun_fragile"
IDLE_TIMEOUT_SECONDS = 30.0
SUBSCRIBER_LOG = "subscriber.jsonl"


class FileLedger(Ledger):
    """A :class:`Ledger` that also appends each entry to a file, durably, before returning."""

    def __init__(self, path: Path, generation: int, *, kill_at_tool: int | None) -> None:
        super().__init__()
        self._generation = generation
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._kill_at_tool = kill_at_tool
        self._executions = 0

    def append(self, kind: str, **fields: Any) -> None:
        """Append one JSON line (``kind``, this process's generation and pid, ``fields``) and fsync
        it before returning.
        """
        line = {"kind": kind, "generation": self._generation, "pid": os.getpid(), **fields}
        # One write(2) per line: a kill lands before or after it, never inside a line.
        os.write(self._fd, json.dumps(line, sort_keys=True).encode() + b"\n")
        os.fsync(self._fd)

    def record(self, entry: LedgerEntry) -> None:
        super().record(entry)
        self.append("tool", **msgspec.to_builtins(entry))
        self._executions += 1
        if self._executions == self._kill_at_tool:
            # The side effect is on record; its result is not: die right here.
            os.kill(os.getpid(), signal.SIGKILL)

    def refuse(self, entry: LedgerEntry) -> None:
        super().refuse(entry)
        self.append("refused", **msgspec.to_builtins(entry))

    def close(self) -> None:
        """Close the ledger file."""
        os.close(self._fd)


def install_rerun_fragile_mutant() -> None:
    """The mutant: every resumed call looks fresh, so a non-durable tool runs again."""
    from agentkeep.actors import tool_runner

    original = tool_runner.ToolRunner.bind

    def bind(self: tool_runner.ToolRunner, run: Any, cancel: Any, tools: Any) -> Any:
        return original(self, msgspec.structs.replace(run, resumed=False), cancel, tools)

    setattr(tool_runner.ToolRunner, "bind", bind)  # noqa: B010  # patching a method


def _current_generation(marker: Path) -> int:
    try:
        return int(marker.read_text())
    except (OSError, ValueError):
        return -1


def run(home: Path, ledger_path: Path, generation: int, offers: int) -> dict[str, Any]:
    """Play one process; returns what it saw (only if nobody killed it)."""
    mutant = os.environ.get(MUTANT_ENV, "")
    if mutant == RERUN_FRAGILE:
        install_rerun_fragile_mutant()
    if mutant == "reconnect_without_lock":
        from agentkeep.chaos._mutants.ownership import install_reconnect_without_lock_mutant

        install_reconnect_without_lock_mutant()
    broken: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if mutant:
        from agentkeep.chaos._mutants.runtime import LEDGER_MUTANTS  # tests only: on demand

        broken = LEDGER_MUTANTS[mutant]() if mutant in LEDGER_MUTANTS else broken
    with broken:
        return _play(home, ledger_path, generation, offers)


def _play(home: Path, ledger_path: Path, generation: int, offers: int) -> dict[str, Any]:
    kill_at = os.environ.get(KILL_AT_TOOL_ENV, "").strip()
    subscriber_seed = os.environ.get(SUBSCRIBER_ENV, "").strip()
    ledger = FileLedger(ledger_path, generation, kill_at_tool=int(kill_at) if kill_at else None)
    marker = ledger_path.with_name("generation")

    def alive() -> bool:
        # A tool of any generation but the newest refuses (a zombie cannot have side effects).
        return _current_generation(marker) == generation

    tools = [guard_tool(each, ledger, generation, alive) for each in ledger_tools()]
    providers = Providers()
    providers.add(PROVIDER, RespondingModel(seed=generation), kind="gym")
    subscriber: RecordingSubscriber | None = None
    try:
        system = AgentSystem.open(
            home,
            providers=providers,
            provider=PROVIDER,
            model=MODEL,
            tools=tools,
            database=chaos_database(),
        )
        try:
            try:
                agent = system.resolve(AGENT_ID)
            except UnknownAgentError:
                agent = system.create(id=AGENT_ID)
            if subscriber_seed:
                log = ledger_path.with_name(SUBSCRIBER_LOG)
                kill_subscriber = os.environ.get(SUBSCRIBER_KILL_ENV, "").strip()
                subscriber = RecordingSubscriber(
                    system,
                    AGENT_ID,
                    log,
                    generation,
                    int(subscriber_seed),
                    kill_at=int(kill_subscriber or 0),
                )
                subscriber.start()
            for offer in OFFERS[:offers]:
                # The offer's id is its idempotency key too (T4: a re-offer is a repeat).
                delivery = system.internals.accept(
                    AGENT_ID, "send", user(offer.text), id=offer.id, idempotency_key=offer.id
                )
                ledger.append(
                    "accept",
                    id=offer.id,
                    key=offer.id,
                    created=delivery.created,
                    turn_id=delivery.turn_id,
                )
            # A client retrying the first offer with a fresh message id and the same key:
            # the key alone must make it a repeat of the turn it opened (T4).
            retry = system.internals.accept(
                AGENT_ID,
                "send",
                user(OFFERS[0].text),
                id=f"{OFFERS[0].id}retry{generation}",
                idempotency_key=OFFERS[0].id,
            )
            ledger.append(
                "retry",
                id=retry.id,
                key=OFFERS[0].id,
                created=retry.created,
                turn_id=retry.turn_id,
            )
            idle = agent.wait_for_idle(timeout_seconds=IDLE_TIMEOUT_SECONDS)
            if subscriber is not None:
                # Idle: nothing commits now, so the ledger's tail is the subscriber's goal.
                tail = read_all(lambda after: system.events(AGENT_ID, after=after, limit=1000))
                subscriber.drain(tail[-1].sequence if tail else 0)
            statistics = system.internals.store.statistics()
        finally:
            system.close(timeout_seconds=IDLE_TIMEOUT_SECONDS)
    finally:
        ledger.close()
        if subscriber is not None:
            subscriber.close()
    return {
        "idle": idle,
        "operations": statistics.operations,
        "max_group_size": statistics.max_group_size,
    }


def main(argv: list[str] | None = None) -> int:
    """The child process of the kill campaign: ``HOME LEDGER GENERATION OFFERS`` (``sys.argv``
    unless given).

    Prints ``READY``, plays one process in ``HOME`` (``OFFERS`` messages, tool executions logged to
    ``LEDGER``), then prints ``RESULT`` and its JSON; the parent kills it at a seeded point.

    Returns:
        0 (a killed process never returns).
    """
    home, ledger_path, generation, offers = argv if argv is not None else sys.argv[1:]
    # Warnings (the store's "store_fault_injected" names the operation it dies at) go to
    # stderr as JSON lines for the parent; nothing else is logged.
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    print("READY", flush=True)
    result = run(Path(home), Path(ledger_path), int(generation), int(offers))
    print("RESULT " + json.dumps(result, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
