"""The racing half of the ``lifecycle_races`` campaign: one plan, many threads, one barrier.

:class:`Plan` is drawn from the seed: which agents exist before the race (*residents*), which
ids several threads race to create (*newcomers*), which residents are deleted (and perhaps
re-created) while senders keep sending to them, what the senders send (explicit message ids,
some sent twice), which lookups run beside them, and how the system ends (``close`` or
``shutdown``, sometimes two closers at once) after how much progress.

:class:`Race` runs the plan. Every thread waits at one barrier; a thread that must wait for
progress (a deleter, a closer) waits on a condition with a timeout, never on a sleep. Every
operation is an :class:`Op` stamped with two tickets of one logical :class:`Clock`, taken just
before the call and just after it returned, so the checks can tell "returned before the other
began" from "overlapped" without trusting wall time. The race judges nothing: the checks in
:mod:`agentkeep.chaos.lifecycle_checks` do.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Literal

from agentkeep.agent_system import Agent, AgentSystem
from agentkeep.chaos.process import DurableState, read_durable
from agentkeep.config import AgentConfig
from agentkeep.messages import user
from agentkeep.persistence.opening import open_store
from agentkeep.types.records import QueueName

OpKind = Literal["send", "create", "squat", "delete", "recreate", "resolve", "metadata", "close"]
Ending = Literal["close", "shutdown"]


@dataclass(frozen=True)
class SendStep:
    """One message a sender sends (twice when ``retry``: the repeat must be idempotent)."""

    agent: str
    message: str
    queue: QueueName
    retry: bool


@dataclass(frozen=True)
class Plan:
    """Everything one seed races (see the module docstring)."""

    residents: tuple[str, ...]
    newcomers: tuple[str, ...]
    creators: int  # threads racing to create each newcomer
    create_after: int  # accepted sends the creators wait for
    squatted: tuple[str, ...]  # live residents whose id another create tries to take
    doomed: tuple[str, ...]  # residents deleted during the race
    delete_after: tuple[int, ...]  # accepted sends to each doomed agent before its delete
    recreate: frozenset[str]  # doomed ids their deleter re-creates at once
    senders: tuple[tuple[SendStep, ...], ...]
    lookups: tuple[tuple[Literal["resolve", "metadata"], str], ...]
    ending: Ending
    second_closer: Ending | None  # a second thread closing at the same time
    end_after: int  # accepted sends the closers wait for
    latency: tuple[float, float]  # the model's delay per stream event (seconds)

    @classmethod
    def draw(cls, rng: random.Random) -> Plan:
        """A plan drawn from ``rng``: who exists, who is created, deleted and re-created, who sends,
        and how the system closes.
        """
        residents = tuple(f"r{i}" for i in range(rng.randint(2, 4)))
        newcomers = tuple(f"n{i}" for i in range(rng.randint(1, 2)))
        doomed = tuple(rng.sample(residents, rng.randint(1, min(2, len(residents) - 1))))
        survivors = [r for r in residents if r not in doomed]
        targets = [*residents, *newcomers]
        contested = [*doomed, *newcomers]  # half the sends race a delete or a create
        senders = tuple(
            tuple(
                SendStep(
                    agent=rng.choice(contested if rng.random() < 0.5 else targets),
                    message=f"s{s}m{k}",
                    queue="steering" if rng.random() < 0.25 else "send",
                    retry=rng.random() < 0.3,
                )
                for k in range(rng.randint(3, 6))
            )
            for s in range(rng.randint(2, 4))
        )
        total = sum(len(steps) for steps in senders)
        return cls(
            residents=residents,
            newcomers=newcomers,
            creators=rng.randint(2, 3),
            create_after=rng.randint(0, 2),
            squatted=tuple(rng.sample(survivors, rng.randint(0, 1))),
            doomed=doomed,
            delete_after=tuple(rng.randint(0, 3) for _ in doomed),
            recreate=frozenset(d for d in doomed if rng.random() < 0.6),
            senders=senders,
            lookups=tuple(
                (rng.choice(("resolve", "metadata")), rng.choice(targets))
                for _ in range(rng.randint(2, 6))
            ),
            ending=rng.choice(("close", "shutdown")),
            second_closer=rng.choice((None, None, "close", "shutdown")),
            end_after=rng.randint(0, total),
            latency=rng.choice(((0.0, 0.0), (0.0, 0.002), (0.0005, 0.003))),
        )

    def describe(self) -> str:
        """A one-line description, for failure messages and replays."""
        sends = sum(len(steps) for steps in self.senders)
        closers = self.ending + (f"+{self.second_closer}" if self.second_closer else "")
        return (
            f"plan: residents={list(self.residents)} newcomers={list(self.newcomers)}"
            f"x{self.creators} squatted={list(self.squatted)} doomed={list(self.doomed)}"
            f"@{list(self.delete_after)} recreate={sorted(self.recreate)} "
            f"senders={len(self.senders)} sends={sends} lookups={len(self.lookups)} "
            f"ending={closers}@{self.end_after} latency={self.latency}"
        )


class Clock:
    """A logical clock: strictly increasing tickets, one at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._now = 0

    def tick(self) -> int:
        """The next ticket (thread-safe; each is greater than every earlier one)."""
        with self._lock:
            self._now += 1
            return self._now


@dataclass
class Op:
    """One call of the race: what it was, its tickets, and what it returned or raised."""

    kind: OpKind
    thread: str
    agent: str | None = None
    message: str | None = None
    note: int | None = None  # the creator's index, or the metadata value written
    start: int = 0
    end: int | None = None  # None: still running (a hang)
    result: object = None
    error: Exception | None = None

    @property
    def ok(self) -> bool:
        """True when the call returned without raising."""
        return self.end is not None and self.error is None

    def returned_before(self, other: Op) -> bool:
        """This call returned before ``other`` began."""
        return self.end is not None and self.end < other.start

    def failed(self, *kinds: type[Exception]) -> bool:
        """True when the call raised one of ``kinds``."""
        return self.error is not None and isinstance(self.error, kinds)

    def describe(self) -> str:
        """A one-line description, for failure messages and replays."""
        parts = (self.message,) if self.kind == "close" else (self.kind, self.agent, self.message)
        what = " ".join(str(x) for x in parts if x is not None)
        outcome = "running" if self.end is None else repr(self.error) if self.error else "ok"
        return f"{what} [{self.thread} t{self.start}-{self.end}] -> {outcome}"


class Progress:
    """Accepted sends, per agent and in all; a wait ends early once every sender is done."""

    def __init__(self, senders: int) -> None:
        self._changed = threading.Condition()
        self._senders = senders
        self._done = 0
        self._sent: Counter[str] = Counter()

    def sent(self, agent: str) -> None:
        """Count one accepted send to ``agent``, and wake the waiters."""
        with self._changed:
            self._sent[agent] += 1
            self._sent[""] += 1
            self._changed.notify_all()

    def sender_done(self) -> None:
        """Note that one sender thread finished all its sends, and wake the waiters."""
        with self._changed:
            self._done += 1
            self._changed.notify_all()

    def wait(self, count: int, timeout: float, agent: str = "") -> None:
        """Block until ``count`` sends were accepted (to ``agent``, or in all when it is empty),
        every sender is done, or ``timeout`` seconds passed.
        """
        with self._changed:
            self._changed.wait_for(
                lambda: self._sent[agent] >= count or self._done >= self._senders, timeout
            )


@dataclass
class Race:
    """Runs a :class:`Plan` against an open system (see the module docstring)."""

    system: AgentSystem
    plan: Plan
    home: Path
    timeout: float
    clock: Clock = field(default_factory=Clock)
    ops: list[Op] = field(default_factory=list)
    # A deleted agent's durable state read as soon as its delete returned (None: unreadable),
    # and whether it had an actor then.
    after_delete: dict[str, DurableState | None] = field(default_factory=dict)
    left_alive: dict[str, bool] = field(default_factory=dict)
    # Each closer's store probe right after it returned: None (lock free) or the error.
    probes: list[tuple[Op, Exception | None]] = field(default_factory=list)
    # Called once every closer returned: from then on the system's tools must not run.
    on_closed: Callable[[], None] = lambda: None
    # The store's PostgreSQL URL (None: SQLite in ``home``).
    database: str | None = None

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._probing = threading.Lock()
        self._progress = Progress(len(self.plan.senders))
        self._closers = 1 + (self.plan.second_closer is not None)

    def run(self) -> list[str]:
        """Play the race; the threads still running at the deadline (each a hang)."""
        jobs = self._jobs()
        barrier = threading.Barrier(len(jobs), timeout=self.timeout)

        def released(name: str, job: Callable[[], None]) -> None:
            barrier.wait()
            job()

        threads = [
            threading.Thread(target=released, args=(name, job), name=name, daemon=True)
            for name, job in jobs
        ]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 2 * self.timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return [thread.name for thread in threads if thread.is_alive()]

    def _jobs(self) -> list[tuple[str, Callable[[], None]]]:
        plan = self.plan
        jobs: list[tuple[str, Callable[[], None]]] = [
            (f"sender{s}", partial(self._sender, f"sender{s}", steps))
            for s, steps in enumerate(plan.senders)
        ]
        jobs += [
            (f"creator-{agent}-{c}", partial(self._creator, agent, c))
            for agent in plan.newcomers
            for c in range(plan.creators)
        ]
        jobs += [(f"squatter-{agent}", partial(self._squatter, agent)) for agent in plan.squatted]
        jobs += [
            (f"deleter-{agent}", partial(self._deleter, agent, after))
            for agent, after in zip(plan.doomed, plan.delete_after, strict=True)
        ]
        jobs.append(("looker", self._looker))
        jobs.append(("closer", partial(self._closer, "closer", plan.ending)))
        if plan.second_closer is not None:
            jobs.append(("closer2", partial(self._closer, "closer2", plan.second_closer)))
        return jobs

    # -- the threads -----------------------------------------------------------------------

    def _sender(self, name: str, steps: tuple[SendStep, ...]) -> None:
        try:
            for step in steps:
                accepted = [self._send(name, step) for _ in range(1 + step.retry)]
                if any(accepted):
                    self._progress.sent(step.agent)
        finally:
            self._progress.sender_done()

    def _send(self, name: str, step: SendStep) -> bool:
        agent = Agent(self.system, step.agent)
        method = agent.steer if step.queue == "steering" else agent.send
        op = Op("send", name, step.agent, step.message)
        self._call(op, lambda: method(user(step.message), id=step.message))
        return op.ok

    def _creator(self, agent: str, index: int) -> None:
        self._progress.wait(self.plan.create_after, self.timeout)
        config = AgentConfig(metadata={"creator": index})
        op = Op("create", f"creator-{agent}-{index}", agent, note=index)
        self._call(op, lambda: self.system.create(config, id=agent))

    def _squatter(self, agent: str) -> None:
        self._call(Op("squat", f"squatter-{agent}", agent), lambda: self.system.create(id=agent))

    def _deleter(self, agent: str, after: int) -> None:
        name = f"deleter-{agent}"
        self._progress.wait(after, self.timeout, agent)
        deleted = Op("delete", name, agent)
        self._call(deleted, lambda: self.system.delete(agent, timeout_seconds=self.timeout))
        if not deleted.ok:
            return
        self.left_alive[agent] = agent in self.system.internals.live_agents()
        self.after_delete[agent] = self._read(agent)
        if agent in self.plan.recreate:
            self._call(Op("recreate", name, agent), lambda: self.system.create(id=agent))

    def _looker(self) -> None:
        system = self.system
        for n, (kind, agent) in enumerate(self.plan.lookups):
            if kind == "resolve":
                self._call(Op("resolve", "looker", agent), partial(system.resolve, agent))
            else:
                op = Op("metadata", "looker", agent, note=n)
                self._call(op, partial(system.update_metadata, agent, {"k": n}))

    def _closer(self, name: str, ending: Ending) -> None:
        self._progress.wait(self.plan.end_after, self.timeout)
        op = Op("close", name, message=ending)
        if ending == "close":
            self._call(op, lambda: self.system.close(timeout_seconds=self.timeout))
        else:
            self._call(op, self.system.shutdown)
        with self._lock:
            self._closers -= 1
            if self._closers == 0:
                self.on_closed()
        with self._probing:  # one probe at a time: a probe holds the lock while it runs
            self.probes.append((op, _probe_lock(self.home, self.database)))

    # -- helpers ---------------------------------------------------------------------------

    def _call(self, op: Op, action: Callable[[], object]) -> None:
        op.start = self.clock.tick()
        with self._lock:
            self.ops.append(op)
        try:
            op.result = action()
        except Exception as error:  # judged by the checks, never here
            op.error = error
        finally:
            op.end = self.clock.tick()

    def _read(self, agent: str) -> DurableState | None:
        try:
            return self.system.internals.store.read(lambda tx: read_durable(tx, agent))
        except Exception:  # the store closed right after the delete: nothing to judge
            return None


HUNG = TimeoutError("never returned")


def bounded(action: Callable[[], object], timeout: float) -> Exception | None:
    """Run ``action`` in a daemon thread: None if it returned, the error it raised, or
    :data:`HUNG` if it was still running after ``timeout`` seconds."""
    outcome: list[Exception | None] = []

    def run() -> None:
        try:
            action()
            outcome.append(None)
        except Exception as error:  # reported, never raised
            outcome.append(error)

    thread = threading.Thread(target=run, name="agentkeep-chaos-bounded", daemon=True)
    thread.start()
    thread.join(timeout)
    return outcome[0] if outcome else HUNG


def _probe_lock(home: Path, database: str | None = None) -> Exception | None:
    """Open and close the store: None if its lock was free, else why it could not open."""
    try:
        open_store(home, database=database).close()
    except Exception as error:  # StoreLockedError, or a failure of its own
        return error
    return None


__all__ = [
    "HUNG",
    "Clock",
    "Ending",
    "Op",
    "OpKind",
    "Plan",
    "Progress",
    "Race",
    "SendStep",
    "bounded",
]
