"""Power-loss campaign: the store's writer runs over a disk that loses its unsynced writes.

Each seed opens a store through a :class:`~agentkeep.chaos.powervfs.PowerLossVFS` and
commits rounds of transactions through :meth:`Store.transact` (with a checkpoint every seeded
number of rounds, so database writes and WAL restarts happen inside the window too), each
round from several submitter threads at once so they share one group commit. A round's
composition is exact, not left to timing: a blocker work item holds the writer while the
round's submitters queue one by one (``wait_for_queued``), then lets the whole round run as
one group. Every transaction writes three key-value rows whose values name it, so a partial
one is visible, and accepts one message (id: the transaction's) into a session through the
runtime's own acceptance (:func:`agentkeep.delivery.accept_message`), which appends its
``message.accepted`` event to the session's ledger in the same transaction. After each round
the ledger is read through the live store. The rounds are played once on a healthy disk to
count their I/O operations; same seed, same operations, same cut.

At a seeded fraction of those operations the power is cut in a seeded
:data:`~agentkeep.chaos.powervfs.CutMode`. The surviving image is written to
a fresh directory and judged with the default VFS: ``PRAGMA integrity_check`` is ok, every
transaction whose ``transact`` returned is present whole, no transaction is present in part;
and the ledger (:mod:`agentkeep.chaos.ledger_checks`): ``L1`` its sequences are dense from 1;
``L2`` the queued messages and the ``message.accepted`` events match one for one, and the
transactions present are exactly those with an event; ``L3`` every ledger read before the cut
is a prefix of the surviving one (what was durably committed and seen stays as it was); and
the turns each acceptance opened (idempotency key ``key-<transaction>``): ``T1`` each is
queued with its ``turn.queued`` event, ``T3`` its input's ``message.accepted`` names it,
``T4`` no key holds two turns.
``mutant=`` a name of :data:`~agentkeep.chaos._mutants.runtime.LEDGER_MUTANTS` runs the whole seed
under that ledger mutant (tests only).

``python -m agentkeep.chaos.power --seeds N [--start S] [--jobs J]`` runs a sweep.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import logging
import math
import os
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw
import structlog

from agentkeep.chaos.campaigns import seeds_from_env
from agentkeep.chaos.invariants import Violation
from agentkeep.chaos.ledger_checks import check_events, check_prefix
from agentkeep.chaos.ledger_reads import read_all
from agentkeep.chaos.powervfs import CUT_MODES, CutMode, PowerGrid, PowerLossVFS, PowerOffError
from agentkeep.chaos.process import read_durable
from agentkeep.chaos.turn_checks import check_turns
from agentkeep.delivery import accept_message
from agentkeep.messages import user
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.readers import read_snapshot
from agentkeep.persistence.store import DATABASE_NAME, Store
from agentkeep.types import MessageOptions, SessionEvent
from agentkeep.types.records import AgentRow

DEFAULT_SEEDS = 6
PARTS = ("a", "b", "c")
TIMEOUT_SECONDS = 60.0
_NEVER = 1 << 30  # WAL pages: the writer never checkpoints by itself here
TEST_FILE = "tests/chaos/test_power_loss.py"
LYING_SYNC = "lying_sync"
SESSION = "poweragent"  # the session every transaction accepts its message into
_names = itertools.count()


@dataclass(frozen=True)
class PowerPlan:
    """One seed's schedule: the rounds (each a group of that many transactions), where the
    power fails (a fraction of the run's I/O operations) and how, and the store's
    checkpoint threshold."""

    rounds: tuple[int, ...]
    cut_fraction: float
    mode: CutMode
    value_bytes: int
    checkpoint_every: int  # rounds between checkpoints (0: never)

    def describe(self) -> str:
        """A readable account, for failure messages: what was planned and what the cut left."""
        return (
            f"{len(self.rounds)} rounds of {list(self.rounds)}, cut {self.mode} at "
            f"{self.cut_fraction:.3f} of the run's I/O, values {self.value_bytes} B, "
            f"checkpoint every {self.checkpoint_every or 'no'} round(s)"
        )


def plan(seed: int) -> PowerPlan:
    """The schedule seed ``seed`` plays (a pure function of the seed)."""
    rng = random.Random(seed)
    return PowerPlan(
        rounds=tuple(rng.randint(1, 5) for _ in range(rng.randint(4, 12))),
        cut_fraction=rng.random(),
        mode=rng.choice(CUT_MODES),
        value_bytes=rng.choice([40, 700, 3000, 9000]),
        checkpoint_every=rng.choice([0, 1, 2, 3]),
    )


@dataclass
class PowerCutResult:
    """One seed of the power-cut campaign: what was submitted and acknowledged, what survived the
    cut, and every problem found.
    """

    seed: int
    plan: PowerPlan
    acknowledged: list[str] = field(default_factory=list)
    submitted: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    interrupted: str | None = None
    operations: int = 0  # tracked I/O operations from the first round until the cut
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    mutant: str | None = None
    # The session's ledger as last read through the live store before the cut.
    seen_events: list[SessionEvent] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems

    @property
    def replay(self) -> str:
        """The shell command that replays exactly this seed."""
        return f"CHAOS_SEED={self.seed} .venv/bin/pytest {TEST_FILE}"

    def describe(self) -> str:
        """A readable account, for failure messages: what was planned and what the cut left."""
        mutant = f" (mutant {self.mutant})" if self.mutant else ""
        lines = [f"power cut seed {self.seed}{mutant}: {len(self.problems)} problem(s)"]
        lines += [f"  - {problem}" for problem in self.problems]
        lines.append(f"  plan: {self.plan.describe()}; the cut interrupted {self.interrupted}")
        lines.append(
            f"  {len(self.submitted)} submitted, {len(self.acknowledged)} acknowledged, "
            f"{len(self.present)} present after the cut"
        )
        lines.append(f"  replay: {self.replay}")
        return "\n".join(lines)


def value_of(tx_id: str, part: str, size: int) -> str:
    """The row ``part`` of transaction ``tx_id``: names both, padded to ``size``."""
    head = f"{tx_id}:{part}:"
    return (head * (size // len(head) + 1))[:size]


def _work(tx_id: str, size: int) -> Any:
    def work(tx: Transaction) -> str:
        for part in PARTS:
            tx.kv.write(f"tx.{tx_id}.{part}", value_of(tx_id, part, size))
        # A runtime fact with its ledger event, in the same transaction as the rows.
        accept_message(
            tx,
            SESSION,
            queue="send",
            message=user(tx_id),
            message_id=tx_id,
            options=MessageOptions(),
            metadata=None,
            idempotency_key=f"key-{tx_id}",
        )
        return tx_id

    return work


def _round(store: Store, tx_ids: list[str], size: int) -> dict[str, bool]:
    """Commit ``tx_ids`` as one group from one thread each; True where ``transact`` returned."""
    outcomes: dict[str, bool] = {}
    holding, release = threading.Event(), threading.Event()

    def hold(tx: Transaction) -> None:
        holding.set()
        release.wait(TIMEOUT_SECONDS)

    def submit(name: str, work: Any) -> None:
        try:
            store.transact(work)
            outcomes[name] = True
        except Exception:
            outcomes[name] = False
        finally:
            holding.set()  # a blocker that never ran must not leave the round waiting

    threads = [threading.Thread(target=submit, args=("", hold))]
    threads[0].start()
    holding.wait(TIMEOUT_SECONDS)
    if outcomes.get("") is False:
        threads[0].join(TIMEOUT_SECONDS)
        return dict.fromkeys(tx_ids, False)
    for queued, tx_id in enumerate(tx_ids, start=1):
        thread = threading.Thread(target=submit, args=(tx_id, _work(tx_id, size)))
        thread.start()
        threads.append(thread)
        store.handle.wait_for_queued(queued, timeout_seconds=TIMEOUT_SECONDS)
    release.set()
    for thread in threads:
        thread.join(TIMEOUT_SECONDS)
    outcomes.pop("", None)
    return outcomes


def run_campaign(
    seed: int, *, home: str | Path | None = None, mutant: str | None = None
) -> PowerCutResult:
    """Play seed ``seed`` in a temporary directory (or ``home``).

    The rounds are first played on a healthy disk to count their I/O operations (the same
    rounds give the same operations), so the cut lands anywhere in the run with equal odds.
    ``mutant="lying_sync"`` (tests only) breaks durability on purpose: the disk's ``xSync``
    reports success and persists nothing, so acknowledged work can be lost.
    """
    started = time.monotonic()
    schedule = plan(seed)
    result = PowerCutResult(seed=seed, plan=schedule, mutant=mutant)
    broken: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if mutant is not None:
        from agentkeep.chaos._mutants.runtime import LEDGER_MUTANTS  # tests only: on demand

        broken = LEDGER_MUTANTS[mutant]() if mutant in LEDGER_MUTANTS else broken
    with broken, tempfile.TemporaryDirectory(prefix=f"chaos-power-{seed}-") as scratch:
        base = Path(home or scratch)
        healthy = PowerGrid(seed=seed, mode="keep")
        total = _play(base / "count", schedule, healthy, None, PowerCutResult(seed, schedule))
        cut_at = max(1, math.ceil(schedule.cut_fraction * total))
        grid = PowerGrid(seed=seed, mode=schedule.mode, lying_sync=mutant == LYING_SYNC)
        result.operations = _play(base / "state", schedule, grid, cut_at, result)
        result.interrupted = grid.cut_operation
        reboot = base / "reboot"
        reboot.mkdir()
        for path, content in grid.surviving().items():
            (reboot / Path(path).name).write_bytes(content)
        _judge(reboot, schedule, result)
    result.seconds = time.monotonic() - started
    return result


def _play(
    home: Path, schedule: PowerPlan, grid: PowerGrid, cut_at: int | None, result: PowerCutResult
) -> int:
    """Commit the rounds over ``grid`` until the power is cut; returns the I/O operations
    counted from the first round."""
    vfs = PowerLossVFS(f"agentkeep-power-{os.getpid()}-{next(_names)}", grid)
    try:
        # The writer's own checkpoints run when its inbox is empty, which races the next
        # round's first submission; the campaign checkpoints between rounds instead (the same
        # SQLite checkpoint, through the same VFS), so one seed gives one I/O sequence.
        store = Store.open(home, vfs=vfs.name, checkpoint_pages=_NEVER)
        checkpointer = apsw.Connection(str(home / DATABASE_NAME), vfs=vfs.name)
        checkpointer.execute("PRAGMA mmap_size = 0")  # every byte through the VFS
        store.transact(lambda tx: tx.agents.create(AgentRow(id=SESSION, config={})))
        armed_at = grid.operations
        try:
            if cut_at is not None:
                grid.arm(cut_at)
            for number, size in enumerate(schedule.rounds):
                tx_ids = [f"r{number}t{index}" for index in range(size)]
                result.submitted += tx_ids
                outcomes = _round(store, tx_ids, schedule.value_bytes)
                result.acknowledged += [t for t in tx_ids if outcomes.get(t)]
                # Read through the checkpointer's connection (the same VFS, committed state
                # only): the store's reader pool stays unopened, so its close never has to
                # delete the WAL of a disk whose power is off.
                with contextlib.suppress(apsw.Error, PowerOffError):
                    result.seen_events = read_snapshot(checkpointer, _ledger)
                every = schedule.checkpoint_every
                if every and (number + 1) % every == 0 and not grid.dead:
                    with contextlib.suppress(apsw.Error):  # the power may fail inside it
                        checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                if grid.dead:
                    break
            counted = grid.operations - armed_at
            grid.cut()  # a cut planned past the end of the rounds happens now
        finally:
            checkpointer.close()
            store.close()
    finally:
        vfs.unregister()
    return counted


def _judge(reboot: Path, schedule: PowerPlan, result: PowerCutResult) -> None:
    try:
        connection = apsw.Connection(str(reboot / DATABASE_NAME))
        try:
            # First, before anything writes: recovery rebuilds the WAL index here.
            check = connection.execute("PRAGMA integrity_check").fetchall()
        finally:
            connection.close()
        if check == [("ok",)]:
            with Store.open(reboot) as store:
                rows: dict[str, Any] = dict(store.read(lambda tx: tx.kv.scan("tx.")))
                state = store.read(lambda tx: read_durable(tx, SESSION))
                events = store.read(_ledger)
    except apsw.Error as exc:
        check = [(f"{type(exc).__name__}: {exc}",)]
    if check != [("ok",)]:
        result.problems.append(f"integrity_check after the cut: {check}")
        return
    for tx_id in result.submitted:
        found = [rows.get(f"tx.{tx_id}.{part}") for part in PARTS]
        whole = [value_of(tx_id, part, schedule.value_bytes) for part in PARTS]
        if found == whole:
            result.present.append(tx_id)
        elif any(value is not None for value in found):
            result.problems.append(f"transaction {tx_id} is present in part: {found!r:.200}")
    lost = [t for t in result.acknowledged if t not in result.present]
    if lost:
        result.problems.append(f"acknowledged transactions lost by the cut: {lost}")
    strangers = {key.split(".")[1] for key in rows} - set(result.submitted)
    if strangers:
        result.problems.append(f"transactions nobody submitted: {sorted(strangers)}")
    _judge_ledger(result, state, events)


def _ledger(tx: Transaction) -> list[SessionEvent]:
    return read_all(lambda after: tx.ledger.events(SESSION, after, 1000))


def _judge_ledger(result: PowerCutResult, state: Any, events: list[SessionEvent]) -> None:
    """``L1``–``L3`` after the cut (see the module docstring)."""
    found = check_events(state, events, process=1)
    found += check_prefix(result.seen_events, events, process=1)
    found += check_turns(state.turns, events, (), process=1)
    reported = [str(e.data.get("message_id")) for e in events if e.type == "message.accepted"]
    if sorted(reported) != sorted(result.present):
        found.append(
            Violation(
                invariant="L2",
                process=1,
                detail=(
                    f"transactions present whole {sorted(set(result.present) - set(reported))} "
                    f"have no event; events {sorted(set(reported) - set(result.present))} "
                    "have no transaction"
                ),
            )
        )
    result.problems += [v.describe() for v in found]


def main(argv: list[str] | None = None) -> int:
    """The command line ``python -m agentkeep.chaos.power [--seeds N] [--start S] [--jobs J]
    [--mutant M]``.

    Returns:
        The exit status: 0 when every seed held, 1 otherwise.
    """
    parser = argparse.ArgumentParser(prog="python -m agentkeep.chaos.power")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--mutant", default=None)
    args = parser.parse_args(argv)
    seeds = (
        list(range(args.start, args.start + args.seeds))
        if args.seeds is not None
        else seeds_from_env(DEFAULT_SEEDS)
    )
    started = time.monotonic()
    failed: list[int] = []
    modes: Counter[str] = Counter()
    interrupted: Counter[str] = Counter()
    acknowledged = unheard = 0
    _quiet()
    with ProcessPoolExecutor(max_workers=args.jobs, initializer=_quiet) as pool:
        for result in pool.map(_campaign_for_pool, seeds, [args.mutant] * len(seeds)):
            modes[result.plan.mode] += 1
            acknowledged += len(result.acknowledged)
            unheard += len(set(result.present) - set(result.acknowledged))
            interrupted[_interrupted_kind(result.interrupted)] += 1
            if not result.ok:
                failed.append(result.seed)
                print(result.describe(), flush=True)
    print(
        f"seeds {len(seeds)}  failed {len(failed)} {failed}  acknowledged transactions "
        f"{acknowledged}  cuts by mode {dict(sorted(modes.items()))}  "
        f"wall {time.monotonic() - started:.1f} s"
    )
    print(f"  committed but never acknowledged (present, caller not told): {unheard}")
    for kind, count in sorted(interrupted.items()):
        print(f"  cut during {kind:<40}{count:>6}")
    return 1 if failed else 0


def _interrupted_kind(interrupted: str | None) -> str:
    """``"write #87 of agents.db-wal"`` -> ``"write of agents.db-wal"``."""
    if interrupted is None or "#" not in interrupted:
        return "no operation (after the last round)"
    kind, _, rest = interrupted.partition(" #")
    return f"{kind} of {rest.split(' of ')[-1]}"


def _quiet() -> None:
    # The store logs every failed checkpoint and commit after the cut.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))


def _campaign_for_pool(seed: int, mutant: str | None) -> PowerCutResult:
    return run_campaign(seed, mutant=mutant)


if __name__ == "__main__":
    sys.exit(main())
